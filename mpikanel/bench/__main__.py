"""``python -m mpikanel.bench <subcommand>``: each subcommand is a module with add_arguments and run.

A module that writes a result set also has ``results_dir(args) -> str | None`` (the directory this
run writes, its default resolved; None: none): those runs get ``--allow-dirty`` and a
``provenance.json`` in that directory (:mod:`mpikanel.bench.provenance`). ``report`` rebuilds the
tables of the committed result sets (:mod:`mpikanel.bench.report`).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from . import provenance

#: subcommand -> module exposing ``add_arguments(parser)`` and ``run(args) -> int``; add new ones here
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "server": ("mpikanel.bench.server", "parameter-server updates/s vs a plain mpi4py loop"),
    "yield": ("mpikanel.bench.yield_check", "CPU used by a rank blocked in MPI (heavy-yield check)"),
    "kernels": ("mpikanel.bench.kernels", "one SGD epoch per model, dense and CSR, vs memory bandwidth and sklearn"),
    "mpi": ("mpikanel.bench.mpi", "the same workloads under each installed MPI (Open MPI, MPICH, Intel MPI), one table"),
    "sync": ("mpikanel.bench.sync", "time to a target loss of each sync model and baseline, per scenario"),
    "psp-plan": ("mpikanel.bench.psp_plan", "PSP planning time per round and per push at 100 to 10,000 workers"),
    "simcheck": ("mpikanel.bench.simcheck", "replay real runs in the simulator and compare wait, pushes, staleness"),
    "scale": ("mpikanel.bench.scale", "K server ranks: pushes/s, bytes and CPU per push per server, peak RSS, held time"),
    "checkpoint": ("mpikanel.bench.checkpoint", "checkpoint write time and training pause vs np.save of the same bytes"),
    "report": ("mpikanel.bench.report", "the tables of the committed result sets (docs/results), rebuilt"),
}


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand and its flags, run it, return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m mpikanel.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        modules[name] = module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub_parser)
        if hasattr(module, "results_dir"):
            provenance.add_arguments(sub_parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    module = modules[args.command]
    out = module.results_dir(args) if hasattr(module, "results_dir") else None
    if out is None:
        return module.run(args)
    args.out = out
    return provenance.recorded(module.run, args, Path(out), argv)


if __name__ == "__main__":
    sys.exit(main())
