"""Rank-side entry point of ``bench yield``: rank 1 blocks in Recv while rank 0 sleeps, then sends.

Usage: ``mpiexec -n 2 python -m mpikanel.bench._yield_ranks SECONDS [recv|loop]``. Rank 1 prints
one JSON line with the CPU seconds (``time.process_time``) it spent blocked against the wall
seconds: in ``MPI_Recv`` (``recv``, the default), or in mpikanel's own wait loop over a posted
``Irecv`` (``loop``: :func:`mpikanel.comm.waits.wait_all`, what a worker waiting for its reply runs).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time

import numpy as np

import mpikanel.comm  # noqa: F401  - the project default: sets MPIR_CVAR_ENABLE_HEAVY_YIELD first
from mpi4py import MPI  # noqa: E402

from mpikanel.comm.waits import wait_all  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Block rank 1 for about SECONDS inside MPI_Recv (or mpikanel's wait loop); print its CPU fraction."""
    args = argv if argv is not None else sys.argv[1:]
    seconds, how = float(args[0]), (args[1] if len(args) > 1 else "recv")
    comm = MPI.COMM_WORLD
    buf = np.zeros(1)
    comm.Barrier()
    if comm.Get_rank() == 0:
        time.sleep(seconds)
        comm.Send(buf, dest=1, tag=1)
    elif comm.Get_rank() == 1:
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if how == "loop":
            wait_all([comm.Irecv(buf, source=0, tag=1)])
        else:
            comm.Recv(buf, source=0, tag=1)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"wall_s": wall, "cpu_s": cpu, "cpu_fraction": cpu / wall,
                          "voluntary_switches": ru.ru_nvcsw - ru0.ru_nvcsw,
                          "involuntary_switches": ru.ru_nivcsw - ru0.ru_nivcsw,
                          "load_1min": os.getloadavg()[0],
                          "heavy_yield": os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD", ""),
                          "thread_level": MPI.Query_thread(), "wait": how}), flush=True)
    comm.Barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
