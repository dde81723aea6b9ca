"""The worker's progress thread (pytest-mpi): a reply is timed when it lands, not when the worker looks.

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi   (and -n 4: the extra ranks sit this out)
"""
import time

import numpy as np
import pytest

pytestmark = pytest.mark.mpi(min_size=2)

#: the worker "computes" this long (a GIL-free sleep, like a numba step) with the exchange in flight:
#: far longer than an echo takes even on a loaded machine, so the reply lands inside the step
STEP_S = 1.0


def _echo_server(comm, n_params: int, exchanges: int) -> None:
    """Rank 0: answer each push at once with the payload + 1 (a dense reply: header, then range)."""
    from mpi4py import MPI

    from mpikanel.engine.messages import PAYLOAD_OFFSET, Frame, Tag
    frame = Frame.allocate(n_params)
    for _ in range(exchanges):
        comm.Recv([frame.buf, MPI.BYTE], source=1, tag=Tag.PUSH)
        frame.payload += 1.0
        comm.Send([frame.buf[:PAYLOAD_OFFSET], MPI.BYTE], dest=1, tag=Tag.REPLY)
        comm.Send([frame.payload, MPI.DOUBLE], dest=1, tag=Tag.REPLY_DATA)


@pytest.mark.parametrize("background", [True, False])
def test_a_reply_landing_mid_step_is_timed_when_it_lands(background):
    from mpi4py import MPI

    from mpikanel.comm.worker import WorkerClient
    comm = MPI.COMM_WORLD.Split(color=int(MPI.COMM_WORLD.Get_rank() < 2), key=MPI.COMM_WORLD.Get_rank())
    try:
        if MPI.COMM_WORLD.Get_rank() >= 2:
            return
        if comm.Get_rank() == 0:
            _echo_server(comm, 8, 1)
            return
        client = WorkerClient(comm, 8)
        if not client.progress:
            pytest.skip("this MPI provides less than THREAD_SERIALIZED: no progress thread")
        try:
            client.delta[:] = 2.0
            client.start(1, 1, STEP_S, last=True, background=background)
            time.sleep(STEP_S)                     # the step: the reply lands during it
            looked = time.perf_counter()
            reply = client.test()
            looking_s = time.perf_counter() - looked
            assert reply is not None
            assert np.all(reply.params == 3.0)
            # an ordering, not a margin: did it land before the worker looked (landed_ago_s longer
            # than the look itself took), or while it looked?
            if background:
                # the progress thread saw it land inside the step, and timed it then
                assert reply.landed_ago_s > looking_s, (reply.landed_ago_s, looking_s)
                assert reply.rtt_s + reply.landed_ago_s >= STEP_S
            else:
                # nobody drove it: seen (and timed) only when the worker looked
                assert reply.landed_ago_s <= looking_s, (reply.landed_ago_s, looking_s)
                assert reply.rtt_s >= STEP_S
        finally:
            client.close()
    finally:
        comm.Free()
