"""Horovod-style synchronous data-parallel SGD: the baseline the parameter server is compared with.

Usage: ``mpiexec -n R python -m mpikanel.baselines.allreduce_sgd [mpikanel.train's flags]``
(data, model, --lr, --batch-size, --epochs, --budget, --val-fraction, --seed,
--slowdown/--pause-*/--link-*, --metrics, --summary-json, --quiet; --sync and the server's
flags are ignored).

Every one of the R ranks trains (there is no server, so R trainers against the parameter
server's R-1 workers): each step every rank takes one minibatch step of the same numba kernels
from the common parameters, then ``Allreduce(SUM)`` of the parameter deltas gives
params_new = params_old + sum of the deltas, exactly the parameter server's BSP update.
Work budget: with ``--budget shared`` (default) the ranks process EPOCHS x training rows
samples in total, each an equal share (all ranks take the same number of steps); with
``per-worker`` every rank makes EPOCHS passes over its shard. The validation rows
(``--val-fraction``) are the last F of the training rows, held out before sharding.
Heterogeneity injection uses worker number rank+1, so ``--slowdown 1:4`` slows MPI rank 0;
the slowdown scales each step's CPU time, like the parameter server's workers, and
``--step-time S`` paces every rank as it paces them (the same :class:`mpikanel.worker_loop.Pacer`):
each step lasts max(its compute, S x rows/batch x the slowdown factor, plus any pause), the rest
slept, with the same summary keys and "pacing not held" message. Rank 0 copies
the parameters every ``--snapshot-interval`` s and evaluates the copies after training.
The loop, the comm/wait split and the summary are in :mod:`mpikanel.baselines.common`.
"""
from __future__ import annotations

import mpikanel.comm  # noqa: F401  - MPICH heavy-yield and thread defaults before MPI starts

from ..config import TrainConfig  # noqa: E402
from .common import PACING_HELP, train_allreduce  # noqa: E402

DESCRIPTION = ("Horovod-style synchronous allreduce SGD, the baseline of the parameter server: every rank trains "
               "and after each step the ranks' deltas are summed (Allreduce). Takes mpikanel.train's flags "
               "(--sync and the server's are ignored). " + PACING_HELP)


def train(config: TrainConfig, comm) -> dict | None:
    """Collective allreduce SGD; returns the summary on rank 0 (None elsewhere)."""
    return train_allreduce(config, comm, "allreduce", every=1, scale=1.0)


def main(argv: list[str] | None = None) -> int:
    """CLI: 2 on bad input (every rank), MPI Abort naming the rank on any failure during training."""
    from ..comm.cli import run_cli

    def body(config, world) -> int:
        train(config, world)
        return 0

    return run_cli("allreduce_sgd", body, argv, command="python -m mpikanel.baselines.allreduce_sgd",
                   description=DESCRIPTION)


if __name__ == "__main__":
    from ..comm.cli import end_rank

    end_rank(main())
