"""Resuming a run from a checkpoint: find it, check it fits this run, and what is left to do."""
from __future__ import annotations

import sys
from typing import Any

from . import checkpoint as ckpt_mod
from .config import TrainConfig
from .engine.budget import total_samples
from .errors import InputError
from .session import Session, budget_for


def find_resume(config: TrainConfig):
    """Rank 0: the checkpoint --resume names, read and verified (None for 'latest' in an empty directory)."""
    if config.resume != "latest":
        return ckpt_mod.load(config.resume, worker_arrays=False)
    ckpt, notes = ckpt_mod.load_latest(config.checkpoint_dir, worker_arrays=False)
    for note in notes:
        print(f"mpikanel: {note}", file=sys.stderr, flush=True)
    if ckpt is None:
        if notes:
            raise InputError(f"{config.checkpoint_dir}: no valid checkpoint to resume ({notes[-1]})")
        print(f"mpikanel: no checkpoint in {config.checkpoint_dir}; starting fresh", file=sys.stderr, flush=True)
    return ckpt


def prepare_resume(ckpt, config: TrainConfig, ranks: int, s: Session) -> tuple[Any, str | None, str | None]:
    """Rank 0: (the checkpoint as this run starts from it, its path, None), or (None, None, why nothing
    is left to do); InputError if it cannot continue this run."""
    if ckpt is None:
        return None, None, None
    ckpt_mod.check_compatible(ckpt, ranks, config.sync, s.model.name, s.n_params)
    left = remaining_work(ckpt, config, s.train_rows)
    if left is not None:
        return None, None, left
    if ckpt.ranks != ranks:
        if not config.quiet:
            print(f"mpikanel: {ckpt.path} was written by {ckpt.ranks} ranks; resuming on {ranks}: unsent work "
                  "folded into the parameters, shards dealt anew, sync state restarted", flush=True)
        ckpt = ckpt_mod.reshape(ckpt, ranks)
        # each worker starts on the lease the server's restored budget gives it
        budget = budget_for(config, ranks - 1, s.train_rows)
        budget.restore(ckpt.server["budget"])
        for w, start in enumerate(ckpt.workers):
            start["lease"] = int(budget.lease[w])
    if not config.quiet:
        print(f"mpikanel: resumed from {ckpt.path} ({ckpt.reason}, {ckpt.elapsed_s:.1f} s trained)", flush=True)
    return ckpt, str(ckpt.path), None


def remaining_work(ckpt, config: TrainConfig, train_rows: int) -> str | None:
    """Why a checkpoint leaves this run nothing to do (None: work is left); InputError when it has
    already done more than this run's budget."""
    done = samples_done(ckpt)
    budget = total_samples(config.epochs, train_rows)
    where = ckpt.path or "checkpoint"
    if ckpt.final:
        return f"{where} is the end of its run ({done} of {budget} samples done); nothing left"
    if config.max_steps is not None or config.time_budget is not None:
        return None      # the budget is not (only) samples: the run itself finds out
    if done > budget:
        was = ckpt.config.get("epochs")
        raise InputError(f"{where}: the checkpoint has done {done} samples, more than this run's budget of {budget} "
                         f"(--epochs {config.epochs} x {train_rows} rows); leave --epochs out to continue its "
                         f"run's budget" + (f" (--epochs {was})" if was is not None else ""))
    if done == budget:
        return f"the checkpoint has done {done} of the {budget} samples; nothing left"
    return None


def samples_done(ckpt) -> int:
    """Training samples a checkpoint's run has processed: pushed, plus what workers held unsent."""
    held = sum(int(w["state"]["schedule"].get("unsent_samples", 0)) for w in ckpt.workers if "state" in w)
    return int(ckpt.server["budget"]["counted"]) + held

