"""The library API under mpiexec (pytest-mpi): `mpikanel.train.train(config, comm)` from an mpi4py program.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi   (and -n 4)
"""
import pytest

import mpikanel
from mpikanel.train import train

pytestmark = pytest.mark.mpi(min_size=2)

SMALL = {"synthetic_rows": 6000, "epochs": 1, "quiet": True}


def test_train_returns_same_summary_everywhere_and_leaves_comm_usable():
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    summary = train({"sync": "asp", **SMALL}, comm=comm)
    assert summary["workers"] == comm.Get_size() - 1
    assert summary["deltas_sent"] == summary["deltas_applied"]
    assert comm.allgather(summary["params_sha256"]) == [summary["params_sha256"]] * comm.Get_size()
    assert comm.allreduce(1) == comm.Get_size()   # the caller's communicator was duplicated, not consumed


def test_train_on_sub_communicators():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if world.Get_size() < 4:
        pytest.skip("needs 4 ranks for two independent 2-rank jobs")
    sub = world.Split(color=world.Get_rank() % 2, key=world.Get_rank())
    try:
        s = train(mpikanel.make_config(sync="bsp", seed=sub.Get_rank() * 0 + 1, **SMALL), comm=sub)
        assert s["ranks"] == sub.Get_size()
    finally:
        sub.Free()


def test_bad_input_raises_on_every_rank():
    from mpi4py import MPI
    with pytest.raises(mpikanel.InputError, match="no such file"):
        train({"data": "/nonexistent/data.npz", **SMALL}, comm=MPI.COMM_WORLD)


def test_bsp_same_result_from_keywords_and_dict():
    from mpi4py import MPI
    a = train(sync="bsp", comm=MPI.COMM_WORLD, **SMALL)
    b = train({"sync": "bsp", **SMALL}, MPI.COMM_WORLD)
    assert a["params_sha256"] == b["params_sha256"]
