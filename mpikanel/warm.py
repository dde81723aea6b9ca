"""python -m mpikanel.warm: compile the built-in models' kernels into numba's cache ahead of a job.

A job's ranks then load them from the cache at once; without it, the first job compiles them on
rank 0 while its other ranks wait (about 90 s of one core for every model, dense and CSR). Three
tasks compile apart, in up to ``--jobs`` processes (default 3, one a task, even on 2 cores: a
compile has no other use for the core): the CSR kernels with lazy L2, the other CSR kernels, and
the dense ones.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from .kernels import BUILTIN, drop_stale_cache, get_model, kernels_cached, mark_cached, warmup

KINDS = ("sparse", "dense")
#: the tasks of each kind, the longest compile first: the CSR steps with lazy L2, the other CSR kernels
TASKS = {"sparse": ("lazy", "sparse"), "dense": ("dense",)}


def warm(task: str, names: list[str]) -> None:
    """Compile (or load) the named models' kernels of one task."""
    for model in map(get_model, names):
        if task == "dense":
            warmup(model, sparse=False)
        elif model.supports_csr:
            warmup(model, dense=False, csr=("lazy",) if task == "lazy" else ("eager",))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a wrong model or kind is one line and exit 2 (argparse)."""
    parser = argparse.ArgumentParser(prog="python -m mpikanel.warm", description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"built-in models (default: all: {' '.join(BUILTIN)})")
    parser.add_argument("--kind", choices=("both", "dense", "sparse"), default="both",
                        help="the dense kernels, the CSR ones, or both (default: both)")
    parser.add_argument("--jobs", type=int, default=3,
                        help="processes compiling at once, each one task: the CSR steps with lazy L2, the "
                             "other CSR kernels, the dense ones (default: 3)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in BUILTIN]
    if unknown:
        parser.error(f"no built-in model {', '.join(unknown)}; the built-in ones: {', '.join(BUILTIN)}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Compile; print what and where."""
    args = parse_args(argv)
    names = args.models or list(BUILTIN)
    kinds = list(KINDS) if args.kind == "both" else [args.kind]
    drop_stale_cache()      # once, here: not in two processes at once
    t0 = time.perf_counter()
    tasks = [t for kind in kinds for t in TASKS[kind]]
    if args.jobs == 1:
        for task in tasks:
            warm(task, names)
    else:
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(tasks)), mp_context=get_context("spawn")) as pool:
            for done in [pool.submit(warm, task, names) for task in tasks]:
                done.result()
    for model in map(get_model, names):     # once every task is done: a marker says all of a kind is cached
        for kind in kinds:
            if kind == "dense" or model.supports_csr:
                mark_cached(model, dense=kind == "dense", sparse=kind == "sparse")
    what = f"{' '.join(names)} ({'dense and CSR' if args.kind == 'both' else args.kind})"
    last = kinds[-1]
    probe = next((m for m in map(get_model, names) if last == "dense" or m.supports_csr), None)
    if probe is not None and not kernels_cached(probe, dense=last == "dense", sparse=last == "sparse"):
        print(f"mpikanel: compiled {what}, but numba could not cache them (is NUMBA_CACHE_DIR writable?)",
              file=sys.stderr)
        return 1
    where = os.environ.get("NUMBA_CACHE_DIR") or "numba's cache beside the kernels' sources"
    print(f"mpikanel: {what} compiled into {where} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
