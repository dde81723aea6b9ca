"""python -m mpikanel.warm: compile the built-in models' kernels into numba's cache ahead of a job.

A job's ranks then load them from the cache at once; without it, the first job compiles them on
rank 0 while its other ranks wait (about 90 s of one core for every model, dense and CSR). The
dense and the CSR kernels compile in separate processes (``--jobs 2``, the default where there
are 2 cores): the CSR ones take the longest.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from .kernels import BUILTIN, drop_stale_cache, get_model, kernels_cached, mark_cached, warmup

KINDS = ("sparse", "dense")     # the CSR kernels first: the longest compile


def warm(kind: str, names: list[str]) -> None:
    """Compile (or load) the `kind` kernels of the named models and record them as cached."""
    for name in names:
        model = get_model(name)
        flags = {"dense": kind == "dense", "sparse": kind == "sparse"}
        if kind == "dense" or model.supports_csr:
            warmup(model, **flags)
            mark_cached(model, **flags)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a wrong model or kind is one line and exit 2 (argparse)."""
    parser = argparse.ArgumentParser(prog="python -m mpikanel.warm", description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"built-in models (default: all: {' '.join(BUILTIN)})")
    parser.add_argument("--kind", choices=("both", "dense", "sparse"), default="both",
                        help="the dense kernels, the CSR ones, or both (default: both)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes compiling at once: 1, or 2 and more for the dense and the CSR kernels "
                             "apart (default: 2 where there are 2 cores)")
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
    if args.jobs == 1 or len(kinds) == 1:
        for kind in kinds:
            warm(kind, names)
    else:
        with ProcessPoolExecutor(max_workers=len(kinds), mp_context=get_context("spawn")) as pool:
            for done in [pool.submit(warm, kind, names) for kind in kinds]:
                done.result()
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
