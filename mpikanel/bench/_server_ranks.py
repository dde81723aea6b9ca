"""Rank-side entry point of ``bench server``: one mode, timed on every rank, one JSON line from rank 0.

Usage: ``mpiexec -n R python -m mpikanel.bench._server_ranks MODE --params N --pushes P --repeats K``.
MODE is ``asp`` or ``bsp`` (mpikanel's ParameterServer + WorkerClient.exchange), ``plain``
(a hand-written blocking mpi4py loop of the same message size), or ``asp-<variant>`` /
``bsp-<variant>`` (bench-only receive loops from ``_server_variants``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

import mpikanel.comm  # noqa: F401  - sets MPIR_CVAR_ENABLE_HEAVY_YIELD before MPI starts
from mpi4py import MPI  # noqa: E402

import mpikanel  # noqa: E402
from mpikanel.engine.messages import HEADER_INTS, META_FLOATS, Tag  # noqa: E402
from mpikanel.comm.server import ParameterServer  # noqa: E402
from mpikanel.comm.worker import WorkerClient  # noqa: E402
from mpikanel.engine.server_core import ServerCore  # noqa: E402
from mpikanel.config import make_policy  # noqa: E402

DELTA = 1e-6   # every push adds this to every parameter: the final sum checks the run


def _worker_exchange(comm: MPI.Comm, n: int, pushes: int) -> None:
    client = WorkerClient(comm, n)
    for i in range(pushes):
        client.delta[:] = DELTA
        client.exchange(clock=i + 1, steps=1, step_s=0.0, last=i == pushes - 1)


def _ps_round(comm: MPI.Comm, n: int, pushes: int, policy: str, variant: str) -> np.ndarray | None:
    """One round through mpikanel's server/client (or a bench-only server variant)."""
    if comm.Get_rank() != 0:
        _worker_exchange(comm, n, pushes)
        return None
    params = np.zeros(n)
    core = ServerCore(params, make_policy(policy), comm.Get_size() - 1)
    if variant:
        from mpikanel.bench._server_variants import VARIANTS
        server = VARIANTS[variant](comm, core)
    else:
        server = ParameterServer(comm, core)
    server.run()
    return params


def _plain_round(comm: MPI.Comm, n: int, pushes: int, policy: str, variant: str) -> np.ndarray | None:
    """One round of a typical hand-written mpi4py PS: blocking Recv(ANY_SOURCE), add, Send back."""
    off = HEADER_INTS + META_FLOATS            # same bytes on the wire as a frame
    buf = np.zeros(off + n)
    if comm.Get_rank() != 0:
        reply = np.zeros(off + n)
        for _ in range(pushes):
            buf[off:] = DELTA
            comm.Send(buf, dest=0, tag=Tag.PUSH)
            comm.Recv(reply, source=0, tag=Tag.REPLY)
        return None
    out = np.zeros(off + n)
    params = out[off:]
    st = MPI.Status()
    for _ in range(pushes * (comm.Get_size() - 1)):
        comm.Recv(buf, source=MPI.ANY_SOURCE, tag=Tag.PUSH, status=st)
        params += buf[off:]
        comm.Send(out, dest=st.Get_source(), tag=Tag.REPLY)
    return params.copy()


def _timed(comm: MPI.Comm, round_fn: Callable, n: int, pushes: int, mode: str) -> tuple[float, bool]:
    policy, _, variant = mode.partition("-")
    comm.Barrier()
    t0 = time.perf_counter()
    params = round_fn(comm, n, pushes, policy, variant)
    wall = time.perf_counter() - t0      # rank 0: until the last reply is sent
    ok = params is None or bool(np.allclose(params, DELTA * pushes * (comm.Get_size() - 1)))
    return wall, ok


def main(argv: list[str] | None = None) -> int:
    """Warm up once, time `repeats` rounds, print rank 0's JSON line."""
    ap = argparse.ArgumentParser(prog="mpikanel.bench._server_ranks")
    ap.add_argument("mode")
    ap.add_argument("--params", type=int, default=10000)
    ap.add_argument("--pushes", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD.Dup()
    round_fn = _plain_round if args.mode == "plain" else _ps_round
    if args.warmup:
        _timed(comm, round_fn, args.params, min(args.warmup, args.pushes), args.mode)
    walls, ok = [], True
    for _ in range(args.repeats):
        wall, good = _timed(comm, round_fn, args.params, args.pushes, args.mode)
        walls.append(wall)
        ok = ok and good
    if comm.Get_rank() == 0:
        total = args.pushes * (comm.Get_size() - 1)
        rates = [total / w for w in walls]
        print(json.dumps({
            "mode": args.mode, "ranks": comm.Get_size(), "params": args.params,
            "pushes_per_worker": args.pushes, "pushes": total, "wall_s": walls,
            "updates_per_s": statistics.median(rates), "updates_per_s_all": rates, "check_ok": ok,
            "heavy_yield": os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD", ""),
            "versions": {"mpikanel": mpikanel.__version__, "numpy": np.__version__,
                         "mpi4py": sys.modules["mpi4py"].__version__,
                         "mpi_library": MPI.Get_library_version().splitlines()[0].strip()},
        }), flush=True)
    comm.Free()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
