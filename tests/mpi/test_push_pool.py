"""The server's push receive pool (pytest-mpi): frames for what is held or landing, not per worker.

Run: mpiexec -n 4 python -m pytest --with-mpi tests/mpi   (rank 0 serves, the others push)
"""
import pytest

pytestmark = pytest.mark.mpi(min_size=3)


def _landed(pool):
    from mpi4py import MPI
    pool.ensure()
    statuses = []
    done = MPI.Request.Waitsome(pool.requests, statuses)
    return pool.landed(done, statuses)


def test_pool_stays_small_while_pushes_are_used_up_and_grows_to_the_held_ones():
    from mpi4py import MPI

    from mpikanel.engine.messages import Frame, Tag
    from mpikanel.comm.server import PushPool
    comm = MPI.COMM_WORLD
    rank, nw = comm.Get_rank(), comm.Get_size() - 1
    if rank == 0:
        pool = PushPool(comm, first=1, slots=4, n_workers=nw, start=1)
        got = []
        for _ in range(2 * nw):          # every push used up at once (ASP): one frame serves them all
            for w in _landed(pool):
                got.append((w, pool.frame(w).payload[0]))
                pool.release(w)
        assert len(pool.frames) == 1
        assert sorted(got) == sorted((w, 100.0 * w + k) for w in range(nw) for k in range(2))
        comm.barrier()
        held = []
        while len(held) < nw:            # every push held until all are in (a BSP round)
            held += _landed(pool)
        assert len(pool.frames) == nw and sorted(held) == list(range(nw))
        assert all(pool.frame(w).payload[0] == 100.0 * w + 7 for w in held)
        pool.ensure()                # every worker's one push is held: nothing more can arrive
        assert len(pool.frames) == nw
        for w in held:
            pool.release(w)
        pool.close()
    else:
        w = rank - 1
        frame = Frame.allocate(4)
        for k in range(2):
            frame.payload[0] = 100.0 * w + k
            comm.Send([frame.buf, MPI.BYTE], dest=0, tag=Tag.PUSH)
        comm.barrier()
        frame.payload[0] = 100.0 * w + 7
        comm.Send([frame.buf, MPI.BYTE], dest=0, tag=Tag.PUSH)
