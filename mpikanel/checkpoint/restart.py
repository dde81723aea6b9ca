"""Restarting from a checkpoint: whether it fits this run, and the start it gives another worker count."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .layout import Checkpoint
from .read import worker_state


def check_compatible(ckpt: Checkpoint, ranks: int, sync: str, model: str, n_params: int) -> None:
    """InputError unless the checkpoint can resume this run (another rank count: see reshape)."""
    where = ckpt.path or "checkpoint"
    if ckpt.ranks != ranks and ckpt.config.get("budget", "shared") != "shared":
        # ranks count as with one server (workers + 1); with --servers K a run has workers + K
        raise InputError(f"{where}: written by {ckpt.ranks - 1} workers, this run has {ranks - 1}; a --budget "
                         f"per-worker run keeps each worker's own epochs, so resume it on {ckpt.ranks - 1} workers "
                         f"(mpiexec -n {ckpt.ranks - 1} + the number of --servers)")
    if ckpt.sync != sync:
        raise InputError(f"{where}: written by a --sync {ckpt.sync} run, this run is --sync {sync}")
    if ckpt.model != model or ckpt.params.size != n_params:
        raise InputError(f"{where}: holds model {ckpt.model} with {ckpt.params.size} parameters, "
                         f"this run trains {model} with {n_params}")


def reshape(ckpt: Checkpoint, ranks: int) -> Checkpoint:
    """The checkpoint as a start for `ranks` ranks (a different worker count; shared budget only).

    Nothing done is lost: every worker's unsent local work (and the L2 decay a lazy worker still
    owed) is added to the parameters (as the server would have added it), and the samples it
    holds count against the budget. The new
    workers start from those parameters with equal clocks and fresh sync state (the PSP
    predictor relearns within a few rounds); the rows are dealt into the new number of shards as
    in a fresh run, and each worker starts a new pass over its shard in an order drawn from
    (seed, rank, the checkpoint's seq). Delta accounting restarts at the cut: `initial` becomes
    the folded parameters, so the resumed run checks that no delta of its own was lost.
    """
    from ..kernels.lazy import owed_decay     # numba: only when reshaping

    unsent = np.zeros_like(ckpt.params)
    for w in ckpt.workers:          # one worker's arrays at a time (read from its part if not loaded)
        saved = worker_state(w)
        own = np.asarray(saved["unsent"], dtype=np.float64)
        unsent += own
        if "lazy_stamps" in saved:  # the decay a lazy-L2 worker still owed goes in too
            unsent += owed_decay(ckpt.params + own, saved["lazy_stamps"], saved["state"]["lazy_prod"])
    unsent_samples = sum(int(w["state"]["schedule"].get("unsent_samples", 0)) for w in ckpt.workers)
    params = ckpt.params + unsent
    budget = dict(ckpt.server["budget"], counted=int(ckpt.server["budget"]["counted"]) + unsent_samples, lease=None)
    server = {"version": int(ckpt.server["version"]), "deltas_applied": 0, "busy_s": 0.0, "policy": None,
              "budget": budget, "reshaped": {"ranks": ckpt.ranks, "samples_before": budget["counted"],
                                             "seq": ckpt.seq}}
    return Checkpoint(params=params, initial=params.copy(), config=ckpt.config, ranks=ranks, sync=ckpt.sync,
                      model=ckpt.model, server=server, server_arrays={},
                      workers=[{"reshaped_seq": ckpt.seq} for _ in range(ranks - 1)], elapsed_s=ckpt.elapsed_s,
                      reason=ckpt.reason, seq=ckpt.seq, path=ckpt.path, version=ckpt.version)
