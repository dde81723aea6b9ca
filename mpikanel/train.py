"""Entry points: ``python -m mpikanel.train`` and the library call ``mpikanel.train.train(config, comm)``.

Ranks 0..K-1 serve the parameters (``--servers K``, default 1; rank 0 decides for all of them),
the other ranks train. Set-up (data, model, policy; ``mpikanel.session``) is
validated collectively, so bad input raises the same InputError on every rank before
training starts; any failure after that aborts the whole job with the failing rank named.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from .signals import StopSignals

# The CLI catches SIGTERM/SIGUSR1 from its first moment: SLURM may signal while the heavy
# imports below (numba, h5py, mpi4py) are still loading, and a default handler would kill the
# rank with 138/143 instead of checkpointing and exiting 75.
_EARLY_SIGNALS = StopSignals(enabled=True) if __name__ == "__main__" else None

from .comm import environment  # noqa: E402,F401  - sets MPICH defaults before mpi4py starts MPI
from .comm.node import node_ranks, processor_names, ranks_on_node
from .comm.watch import watch_ranks
from .comm.waits import barrier
from . import checkpoint as ckpt_mod
from .config import TrainConfig, make_config, resumed_config
from .errors import NothingLeft
from .kernels import set_threads
from .metrics import SnapshotRecorder
from .publish import publish
from .resume import find_resume, prepare_resume
from .roles import follow, serve, work
from .session import Session, agree, open_session
from .summary import cpu_fields, process_started_at
from .worker_loop import WorkerStats

#: exit code of a run stopped by SIGTERM/SIGUSR1 after writing its checkpoint ("requeue me")
EXIT_CHECKPOINTED = 75


def train(config: TrainConfig | dict | None = None, comm=None, _stop: StopSignals | None = None,
          **overrides: Any) -> dict:
    """Train with the given config on `comm` (default COMM_WORLD, always duplicated).

    Collective over `comm`: call it on every rank. Returns the run summary (the same
    dict on every rank). Raises InputError on every rank for bad input.
    """
    from mpi4py import MPI

    config = make_config(config, **overrides)
    comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
    stop = _stop if _stop is not None else StopSignals(enabled=bool(config.checkpoint_dir))
    names = processor_names(comm)
    watch = watch_ranks(comm, names)
    try:
        found, resuming = None, False
        if config.resume:
            # the checkpointed run's settings, unless given now: read before anything is built from them
            found = agree(comm, lambda: find_resume(config) if comm.Get_rank() == 0 else None)
            checkpointed = comm.bcast(found.config if found is not None else None, root=0)
            resuming = checkpointed is not None
            if resuming:
                config = resumed_config(config, checkpointed)
        s = open_session(config, comm, ranks_on_node(comm))
        threads = set_threads(config.threads)
        if s.model.source is not None:
            s.model.source.set_threads(config.threads)
        rank, k = comm.Get_rank(), config.servers
        # a checkpoint counts ranks as with one server (workers + 1), so it resumes on any --servers
        ranks = comm.Get_size() - k + 1
        params = s.initial_params()
        initial = params.copy()
        ckpt, resumed_from = None, None
        if resuming:
            loaded = agree(comm, lambda: prepare_resume(found, config, ranks, s) if rank == 0 else None)
            left = comm.bcast(loaded[2] if rank == 0 else None, root=0)
            if left:
                raise NothingLeft(left)
            ckpt, resumed_from = loaded[:2] if rank == 0 else (None, None)
            resumed_from = comm.bcast(resumed_from, root=0)
        my_state = unapplied = None
        if resumed_from is not None:
            if rank == 0:
                params[:], initial[:] = ckpt.params, ckpt.initial
            comm.Bcast(params, root=0)
            comm.Bcast(initial, root=0)
            # each worker reads its own part (rank 0 verified every part): no worker's arrays pass through rank 0
            my_state = comm.scatter([None] * k + ckpt.workers if rank == 0 else None, root=0)
            if my_state is not None:
                my_state = ckpt_mod.worker_state(my_state)
            # what a scaling policy held back: each server continues its own range of it
            if comm.bcast(rank == 0 and "unapplied" in ckpt.server_arrays, root=0):
                unapplied = ckpt.server_arrays["unapplied"] if rank == 0 else np.empty_like(params)
                comm.Bcast(unapplied, root=0)
        if config.checkpoint_dir:
            import h5py  # noqa: F401  (now, not at the first cut: every rank writes a part)
        comm.Barrier()
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        started_at, cpu0 = time.time(), time.process_time()
        if rank == 0:
            server_stats, recorder, written = serve(comm, s, params, initial, ckpt, stop)
            stats = WorkerStats(rank=0, rows=0, produced=np.zeros(s.n_params))
        elif rank < k:
            follow(comm, s, params, initial, unapplied)
            stats = WorkerStats(rank=rank, rows=0, produced=np.zeros(s.n_params))
            server_stats = recorder = written = None
        else:
            stats = work(comm, s, params, rank - k, my_state, stop)
            server_stats = recorder = written = None
        wall = time.perf_counter() - t0
        cpu = (time.process_time() - cpu0, process_started_at(), started_at)
        comm.Bcast(params, root=0)
        summary = _finish(comm, s, params, initial, stats, server_stats, recorder, wall, cpu,
                          {"resumed_from": resumed_from, "checkpoint": written[-1]["path"] if written else None,
                           "checkpoints_written": written,
                           "reshaped": ckpt.server.get("reshaped") if ckpt is not None else None,
                           "elapsed_before_s": ckpt.elapsed_s if ckpt is not None else 0.0,
                           "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0],
                           "threads": threads, "nodes": len(set(names)), "node_ranks": node_ranks(names)})
        return summary
    finally:
        watch.close(ending=sys.exc_info()[0] is not None)
        if _stop is None:
            stop.restore()
        comm.Free()


def _finish(comm, s: Session, params: np.ndarray, initial: np.ndarray, stats: WorkerStats, server_stats,
            recorder: SnapshotRecorder | None, wall: float, cpu: tuple, run_info: dict) -> dict:
    """Collective end of run: train loss from the shards, test metrics, summary on every rank.
    `cpu`: this rank's process CPU seconds while training, process start and training start (epoch seconds)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    if rank < s.config.servers:
        shard_loss = (0.0, 0, 0)
    else:
        shard_loss = (s.shard.loss_sum(params), s.shard.rows, s.shard.correct(params))
    losses = comm.gather(shard_loss, root=0)
    worker_stats = comm.gather({**stats.public(), "cpu_s": cpu[0]}, root=0)
    clocks = comm.gather(cpu, root=0)
    produced = np.zeros_like(params) if rank == 0 else None
    comm.Reduce(stats.produced, produced, op=MPI.SUM, root=0)
    summary = None
    if rank == 0:
        run_info = {**run_info, **cpu_fields(clocks, s.config.servers, wall)}
        summary = publish(s, params, initial, losses, worker_stats[s.config.servers:], produced, server_stats, wall,
                          recorder, run_info, MPI.Get_library_version().splitlines()[0], comm.Get_size())
    barrier(comm)               # the other ranks asleep while rank 0 evaluates (MPI's own waits poll a core each)
    return comm.bcast(summary, root=0)


def resume_command(ranks: int, checkpoint_dir: str) -> str:
    """The command that continues a stopped run (its settings come from the checkpoint)."""
    import shlex

    return f"mpiexec -n {ranks} python -m mpikanel.train --checkpoint-dir {shlex.quote(checkpoint_dir)} --resume latest"


def main(argv: list[str] | None = None) -> int:
    """CLI: parse flags, train, print the summary; 2 on bad input, 75 when stopped by a signal
    after checkpointing, MPI Abort on failure."""
    from .comm.cli import run_cli

    stop = _EARLY_SIGNALS if _EARLY_SIGNALS is not None else StopSignals(enabled=True)

    def body(config: TrainConfig, world) -> int:
        if not config.checkpoint_dir:
            stop.end_start_up()           # nothing to checkpoint: signals end the job as usual
        summary = train(config, world, _stop=stop)
        if not summary["stopped"]:
            return 0
        if world.Get_rank() == 0:
            print(f"mpikanel: stopped after writing {summary['checkpoint']}; resume with: "
                  f"{resume_command(world.Get_size(), config.checkpoint_dir)}", file=sys.stderr, flush=True)
        return EXIT_CHECKPOINTED

    return run_cli("mpikanel", body, argv)


if __name__ == "__main__":
    from .comm.cli import end_rank

    end_rank(main())
