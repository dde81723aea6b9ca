"""The server's push receive pool (pytest-mpi): frames for what is held or landing, not per worker.

Run: mpiexec -n 4 python -m pytest --with-mpi tests/mpi   (rank 0 serves, the others push)
"""
import pytest

pytestmark = pytest.mark.mpi(min_size=3)


@pytest.fixture(autouse=True)
def _one_test_at_a_time():
    """Every rank ends a test before any starts the next: an ASK receive still posted by one test's
    pool would take the next test's asks."""
    yield
    from mpi4py import MPI
    MPI.COMM_WORLD.barrier()


def _landed(pool):
    from mpi4py import MPI
    pool.ensure()
    statuses = []
    done = MPI.Request.Waitsome(pool.requests, statuses)
    return pool.landed(done, statuses)


def _serve_two_pushes_each_then_a_held_round(pool, comm, nw):
    """Rank 0: pushes used up at once (ASP) need one frame; a held round (BSP) one per worker."""
    got = []
    while len(got) < 2 * nw:
        for w in _landed(pool):
            got.append((w, pool.frame(w).payload[0]))
            pool.release(w)
    assert len(pool.frames) == 1
    assert sorted(got) == sorted((w, 100.0 * w + k) for w in range(nw) for k in range(2))
    comm.barrier()
    held = []
    while len(held) < nw:            # every push held until all are in
        held += _landed(pool)
    assert len(pool.frames) == nw and sorted(held) == list(range(nw))
    assert all(pool.frame(w).payload[0] == 100.0 * w + 7 for w in held)
    pool.ensure()                    # every worker's one push is held: nothing more can arrive
    assert len(pool.frames) == nw
    for w in held:
        pool.release(w)
    pool.close()


def test_pool_stays_small_while_pushes_are_used_up_and_grows_to_the_held_ones():
    from mpi4py import MPI

    from mpikanel.engine.messages import Frame, Tag
    from mpikanel.comm.pushpool import PushPool
    comm = MPI.COMM_WORLD
    rank, nw = comm.Get_rank(), comm.Get_size() - 1
    if rank == 0:
        pool = PushPool(comm, first=1, slots=4, n_workers=nw, start=1)
        _serve_two_pushes_each_then_a_held_round(pool, comm, nw)
    else:
        w = rank - 1
        frame = Frame.allocate(4)
        for k in range(2):
            frame.payload[0] = 100.0 * w + k
            comm.Send([frame.buf, MPI.BYTE], dest=0, tag=Tag.PUSH)
        comm.barrier()
        frame.payload[0] = 100.0 * w + 7
        comm.Send([frame.buf, MPI.BYTE], dest=0, tag=Tag.PUSH)


def test_granted_pool_lets_no_push_arrive_before_its_go_and_grows_to_the_held_ones():
    import time

    from mpi4py import MPI

    from mpikanel.comm.pushpool import GrantedPool, empty_spec
    from mpikanel.engine.messages import Frame, Tag
    comm = MPI.COMM_WORLD
    rank, nw = comm.Get_rank(), comm.Get_size() - 1
    if rank == 0:
        pool = GrantedPool(comm, first=1, slots=4, n_workers=nw, start=1)
        comm.barrier()                   # every worker has asked
        time.sleep(0.2)
        # the asks are still unread: had any push been sent, it would be waiting here
        assert not comm.Iprobe(source=MPI.ANY_SOURCE, tag=Tag.PUSH)
        _serve_two_pushes_each_then_a_held_round(pool, comm, nw)
    else:
        w = rank - 1
        frame = Frame.allocate(4)

        def push(value: float, before_ask=None) -> None:
            frame.payload[0] = value
            comm.Send(empty_spec(), dest=0, tag=Tag.ASK)
            if before_ask:
                before_ask()
            comm.Recv(empty_spec(), source=0, tag=Tag.GO)
            comm.Send([frame.buf, MPI.BYTE], dest=0, tag=Tag.PUSH)

        push(100.0 * w, comm.barrier)
        push(100.0 * w + 1)
        comm.barrier()
        push(100.0 * w + 7)


@pytest.mark.parametrize("background", [True, False])
def test_a_flow_controlled_worker_sends_its_push_only_on_its_go(background):
    import time

    import numpy as np
    from mpi4py import MPI

    from mpikanel.comm.pushpool import GrantedPool
    from mpikanel.comm.worker import WorkerClient
    from mpikanel.engine.messages import PAYLOAD_OFFSET, Tag
    comm = MPI.COMM_WORLD
    rank, nw, n = comm.Get_rank(), comm.Get_size() - 1, 8

    def reply(pool, w):
        frame = pool.frame(w)
        comm.Send([frame.buf[:PAYLOAD_OFFSET], MPI.BYTE], dest=w + 1, tag=Tag.REPLY)
        comm.Send([frame.payload[:n] + 1.0, MPI.DOUBLE], dest=w + 1, tag=Tag.REPLY_DATA)
        pool.release(w)

    if rank == 0:
        pool = GrantedPool(comm, first=1, slots=n, n_workers=nw, start=1)
        held = []
        while not held:                  # the first push takes the only frame, and keeps it
            held = _landed(pool)
        while pool.queued < nw - 1:      # every other worker asks (no ensure: the pool must not grow)
            statuses = []
            pool.landed(MPI.Request.Waitsome(pool.requests, statuses), statuses)
        time.sleep(0.2)
        for w in range(nw):
            if w != held[0]:             # they asked; their pushes stay with them
                assert not comm.Iprobe(source=w + 1, tag=Tag.PUSH), w
        seen = {held[0]: pool.frame(held[0]).payload[0]}
        reply(pool, held[0])
        while len(seen) < nw:
            for w in _landed(pool):
                seen[w] = pool.frame(w).payload[0]
                reply(pool, w)
        assert seen == {w: w + 1.0 for w in range(nw)} and len(pool.frames) == 1
        pool.close()
    else:
        client = WorkerClient(comm, n, flow=True)
        try:
            client.delta[:] = float(rank)
            client.start(1, 1, 0.01, last=True, background=background)
            assert np.all(client.wait().params == rank + 1.0)
        finally:
            client.close()
