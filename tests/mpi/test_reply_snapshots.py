"""The server's reply snapshots (pytest-mpi): one parameter copy per version, recycled after its sends.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi   (every rank checks it on COMM_SELF)
"""
import numpy as np
import pytest

pytestmark = pytest.mark.mpi(min_size=1)


def test_replies_at_one_version_share_a_snapshot_and_finished_ones_are_recycled():
    from mpi4py import MPI

    from mpikanel.comm.server import ReplySnapshots
    comm = MPI.COMM_SELF
    snaps = ReplySnapshots(4)
    params = np.arange(4.0)
    a = snaps.get(1, params)
    assert snaps.get(1, params + 1) is a and np.array_equal(a, np.arange(4.0))   # same version: shared
    recv = np.empty(4)
    rreq = comm.Irecv(recv, source=0, tag=7)
    snaps.sent(comm.Isend(a, dest=0, tag=7))
    params[:] = 9.0                                # the server applies more pushes
    c = snaps.get(2, params)                       # a's small send may already be done (eager): reusable
    assert np.array_equal(c, params)
    rreq.Wait()
    assert np.array_equal(recv, np.arange(4.0))    # what was sent is the version-1 copy
    d = snaps.get(3, params + 1)                   # every older copy's send is done: one is reused
    assert any(d is x for x in (a, c)) and snaps.peak <= 2 and len(snaps.retired) == 0


def test_a_snapshot_whose_send_is_pending_is_not_reused():
    from mpi4py import MPI

    from mpikanel.comm.server import ReplySnapshots
    comm = MPI.COMM_SELF
    snaps = ReplySnapshots(100_000)                # large: the send cannot complete before its receive
    a = snaps.get(1, np.ones(100_000))
    send = comm.Isend(a, dest=0, tag=8)
    snaps.sent(send)
    b = snaps.get(2, np.zeros(100_000))
    c = snaps.get(3, np.zeros(100_000))
    assert a is not b and a is not c and snaps.peak >= 2
    recv = np.empty(100_000)
    comm.Recv(recv, source=0, tag=8)
    send.Wait()
    assert (recv == 1).all()


@pytest.mark.mpi(min_size=2)
def test_a_bounded_set_waits_for_its_oldest_copy_before_taking_another():
    import time

    from mpi4py import MPI

    from mpikanel.comm.server import ReplySnapshots
    comm = MPI.COMM_WORLD
    n = 2_000_000                                  # 16 MB: a send completes only with its receive
    if comm.Get_rank() == 1:                       # a worker that is slow to take its reply
        time.sleep(0.5)
        recv = np.empty(n)
        comm.Recv(recv, source=0, tag=9)
        assert (recv == 1).all()
        comm.Recv(recv, source=0, tag=10)
        assert (recv == 0).all()
    if comm.Get_rank() != 0:
        return
    snaps = ReplySnapshots(n, limit=2)
    a = snaps.get(1, np.ones(n))
    sa = comm.Isend(a, dest=1, tag=9)
    snaps.sent(sa)
    b = snaps.get(2, np.zeros(n))
    snaps.sent(comm.Isend(b, dest=1, tag=10))
    assert not sa.Test()                           # the worker has not taken a yet
    c = snaps.get(3, np.full(n, 3.0))              # two copies live: a's send is waited for, and a copy
    assert any(c is x for x in (a, b)) and snaps.peak == 2 and (c == 3).all()    # reused (b's too may be done)
    for _, sends in snaps.retired:
        MPI.Request.Waitall(sends)
