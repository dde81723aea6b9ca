"""Ranks that srun started but that each began MPI alone: the one-line error says why, not just "got 1"."""
import pytest

from mpikanel.comm.environment import srun_singleton
from mpikanel.config import make_config
from mpikanel.errors import InputError
from mpikanel.session import open_session

STEP = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_PROCID": "0"}


@pytest.mark.parametrize("size, env, alone", [
    (1, STEP, True),
    (3, STEP, False),                                               # the MPI found SLURM's process manager
    (1, {"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}, False),  # srun -n 1: alone on purpose
    (1, {"SLURM_NTASKS": "3"}, False),                               # a batch shell, not a task srun started
    (1, {"SLURM_STEP_NUM_TASKS": "x", "SLURM_PROCID": "0"}, False),
    (1, {}, False),
])
def test_srun_singleton_only_for_several_tasks_each_alone(size, env, alone):
    why = srun_singleton(size, env)
    assert (why is not None) == alone
    if alone:
        assert "srun started 3 tasks" in why and "--mpi=pmix" in why and "--mpi=pmi2" in why


class _Alone:
    def Get_size(self) -> int:
        return 1

    def Get_rank(self) -> int:
        return 0


@pytest.mark.parametrize("env, needle", [(STEP, "srun started 3 tasks, but each began MPI alone"),
                                         ({}, "run as: mpiexec -n 4 python -m mpikanel.train")])
def test_a_lone_rank_is_told_why(monkeypatch, env, needle):
    for key in ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(InputError) as err:
        open_session(make_config(), _Alone(), 1)
    message = str(err.value)
    assert message.startswith("mpikanel needs at least 2 MPI ranks (1 server + workers), got 1; ") and needle in message
    assert "\n" not in message
