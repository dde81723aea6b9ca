"""Local SGD: every rank takes H local steps, then an Allreduce average of the parameters.

Usage: ``mpiexec -n R python -m mpikanel.baselines.local_sgd --local-steps H [mpikanel.train's flags]``
(the same flags as :mod:`mpikanel.baselines.allreduce_sgd`).

All R ranks train from the common parameters; every H steps (and after the last step) the
parameters become the mean of the ranks' local parameters: params + mean of the deltas, one
``Allreduce(SUM)`` of ``local - params``. H = 1 is synchronous minibatch SGD with the *mean*
of the deltas (``allreduce_sgd`` adds their sum, like the parameter server). Same shards,
kernels, heterogeneity injection, ``--step-time`` pacing (the parameter server workers' own),
shared work budget, validation split, metrics file and summary keys as the other baselines
(:mod:`mpikanel.baselines.common`); ``sync`` in the summary is ``localsgd-H``.
"""
from __future__ import annotations

import argparse
import sys

import mpikanel.comm  # noqa: F401  - MPICH heavy-yield and thread defaults before MPI starts

from ..config import TrainConfig  # noqa: E402
from .common import PACING_HELP, train_allreduce  # noqa: E402

DESCRIPTION = ("Local SGD baseline: every rank takes --local-steps H (default 4) local steps, then the ranks' "
               "parameters are averaged (Allreduce). Takes mpikanel.train's flags (--sync and the server's are "
               "ignored). " + PACING_HELP)


def train(config: TrainConfig, comm, local_steps: int) -> dict | None:
    """Collective local SGD with `local_steps` steps between averages; the summary on rank 0."""
    return train_allreduce(config, comm, f"localsgd-{local_steps}", every=local_steps,
                           scale=1.0 / comm.Get_size(), extra={"local_steps": local_steps})


def _split_args(argv: list[str] | None) -> tuple[int, list[str]]:
    """Take --local-steps off the command line; the rest are mpikanel.train flags."""
    p = argparse.ArgumentParser(prog="local_sgd", add_help=False)
    p.add_argument("--local-steps", type=int, default=4)
    ns, rest = p.parse_known_args(argv)
    return ns.local_steps, rest


def main(argv: list[str] | None = None) -> int:
    """CLI: 2 on bad input (every rank), MPI Abort naming the rank on any failure during training."""
    from ..comm.cli import run_cli

    local_steps, rest = _split_args(sys.argv[1:] if argv is None else argv)
    if local_steps < 1:
        print(f"local_sgd: error: --local-steps must be >= 1, got {local_steps}", file=sys.stderr)
        return 2

    def body(config, world) -> int:
        train(config, world, local_steps)
        return 0

    return run_cli("local_sgd", body, rest, command="python -m mpikanel.baselines.local_sgd --local-steps H",
                   description=DESCRIPTION)


if __name__ == "__main__":
    from ..comm.cli import end_rank

    end_rank(main())
