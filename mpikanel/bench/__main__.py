"""``python -m mpikanel.bench <subcommand>``: each subcommand is a module with add_arguments and run."""
from __future__ import annotations

import argparse
import importlib
import sys

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
}


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand and its flags, run it, return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m mpikanel.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        modules[name] = importlib.import_module(module_name)
        modules[name].add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
