"""Rank-side entry point of ``bench yield``: rank 1 blocks in Recv while rank 0 sleeps, then sends.

Usage: ``mpiexec -n 2 python -m mpikanel.bench._yield_ranks SECONDS``. Rank 1 prints one JSON
line with the CPU seconds (``time.process_time``) it spent blocked against the wall seconds.
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


def main(argv: list[str] | None = None) -> int:
    """Block rank 1 for about SECONDS inside MPI_Recv; print its CPU fraction."""
    seconds = float((argv if argv is not None else sys.argv[1:])[0])
    comm = MPI.COMM_WORLD
    buf = np.zeros(1)
    comm.Barrier()
    if comm.Get_rank() == 0:
        time.sleep(seconds)
        comm.Send(buf, dest=1, tag=1)
    elif comm.Get_rank() == 1:
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        comm.Recv(buf, source=0, tag=1)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"wall_s": wall, "cpu_s": cpu, "cpu_fraction": cpu / wall,
                          "voluntary_switches": ru.ru_nvcsw - ru0.ru_nvcsw,
                          "involuntary_switches": ru.ru_nivcsw - ru0.ru_nivcsw,
                          "load_1min": os.getloadavg()[0],
                          "heavy_yield": os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD", ""),
                          "thread_level": MPI.Query_thread()}), flush=True)
    comm.Barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
