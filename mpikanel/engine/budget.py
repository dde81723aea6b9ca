"""The run's work budget: how many samples the whole cluster processes, enforced by the server.

Pure bookkeeping (no MPI, time passed in). With a shared budget of B samples the server leases
each worker a number of samples it may process beyond its last push; a lease is never shrunk
(the worker may already have used it while its push was in flight) and the leases never add up
to more than what is left of B, so the cluster processes exactly B samples whatever the sync
model, fast workers more of them than slow ones:

* at the start every worker holds a quarter of an equal share, B / (4n) (at least a minibatch);
* a push of s samples from worker w counts s against B and against w's lease;
* the reply to w tops its lease up towards share_w x left / 4 (at least a minibatch), taking only
  from the pool nobody holds, where left = B - counted and share_w is w's measured speed over
  the active workers' total (1 / seconds per step). Workers then hold work in proportion to
  their speed, a quarter of their remaining time at most, and all run out at about the same
  time (the straggler within a minibatch or two);
* a worker whose renewed lease is 0 while nothing is free is told to finish: it pushes its
  unsent work (none: it has used its lease and pushed it) and leaves.

A time budget ends the run the same way once the server's clock passes it: every later reply
says finish and each worker pushes its unsent work first, so nothing is dropped.
``per-worker`` keeps each worker's own epochs (no leases).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: a lease covers 1/LEASE_HORIZON of a worker's share of what is left: a share misjudged early (speeds
#: not yet measured, a worker that slows down later) commits only that much, and never more than
#: a quarter of the remaining work sits in leases a slow worker cannot finish in time
LEASE_HORIZON = 4
#: a lease that never runs out (per-worker budgets, time budget only)
UNLIMITED = np.iinfo(np.int64).max // 4


@dataclass
class Budget:
    """Samples counted and leased per worker; decides each worker's lease and when it finishes."""

    n_workers: int
    total: int | None              # samples the cluster processes (None: no shared sample budget)
    batch_size: int
    time_s: float | None = None    # wall seconds of training (None: no time budget)
    counted: int = 0               # samples pushed so far
    lease: np.ndarray = field(init=False)   # samples each worker may still process beyond its pushes
    expired: bool = False          # the time budget has run out

    def __post_init__(self) -> None:
        if self.total is None:
            self.lease = np.full(self.n_workers, UNLIMITED, dtype=np.int64)
        else:
            # a quarter of an equal share up front: the rest is leased by measured speed
            first = max(self.batch_size, self.total // (4 * self.n_workers))
            self.lease = np.full(self.n_workers, min(first, self.total // self.n_workers), dtype=np.int64)

    @property
    def limited(self) -> bool:
        """Whether a shared sample budget is in force."""
        return self.total is not None

    def initial_lease(self) -> int:
        """Samples each worker may process before its first reply."""
        return int(self.lease[0]) if self.n_workers else 0

    def on_push(self, w: int, samples: int, now_s: float) -> None:
        """Count worker w's pushed samples; note the time budget running out."""
        self.counted += samples
        if self.limited:
            if not self.expired and samples > self.lease[w]:
                raise RuntimeError(f"protocol error: worker {w} pushed {samples} samples on a lease "
                                   f"of {int(self.lease[w])}")
            self.lease[w] = max(0, int(self.lease[w]) - samples)
        if self.time_s is not None and now_s >= self.time_s:
            self.expired = True

    def leave(self, w: int) -> None:
        """Worker w has left: what it did not use of its lease goes back to the others."""
        if self.limited:
            self.lease[w] = 0

    def renew(self, w: int, step_s: np.ndarray | None, active: np.ndarray) -> int:
        """Worker w's lease for its reply (samples beyond its last push); 0 with finish() = leave.

        ``step_s`` None gives equal shares: lockstep models (BSP) stay bitwise reproducible,
        since their leases then do not depend on measured times.
        """
        if self.expired:
            self.lease[w] = 0
            return 0
        if not self.limited:
            return int(self.lease[w])
        left = self.total - self.counted                 # samples not yet pushed
        pool = left - int(self.lease.sum())              # of those, leased to nobody
        target = max(math.floor(_speed_share(w, step_s, active) * left / LEASE_HORIZON), self.batch_size)
        self.lease[w] += min(pool, max(0, target - int(self.lease[w])))
        return int(self.lease[w])

    def finish(self, w: int) -> bool:
        """Whether worker w is done: no lease left and nothing free to renew it with."""
        return self.expired or (self.limited and self.lease[w] == 0)

    def state(self) -> dict:
        """JSON-able state for a checkpoint."""
        return {"counted": self.counted, "lease": self.lease.tolist(), "expired": self.expired}

    def restore(self, state: dict) -> None:
        """Continue from a checkpointed state()."""
        self.counted = int(state["counted"])
        if state["lease"] is None:
            # a start with another worker count: fresh leases, within what is left of the budget
            if self.limited:
                left = max(0, self.total - self.counted)
                self.lease[:] = np.minimum(self.lease, left // max(1, self.n_workers))
        else:
            self.lease[:] = np.asarray(state["lease"], dtype=np.int64)
        self.expired = bool(state["expired"])


def _speed_share(w: int, step_s: np.ndarray | None, active: np.ndarray) -> float:
    """Worker w's share of the active workers' speed (equal shares before speeds are known)."""
    if step_s is None:
        return 1.0 / max(1, int(active.sum()))
    t = np.asarray(step_s, dtype=np.float64)
    known = active & (t > 0)
    if not active[w] or not known.any():
        return 1.0 / max(1, int(active.sum()))
    speed = np.where(known, 1.0 / np.where(known, t, 1.0), 0.0)
    speed[active & ~known] = float(speed[known].mean())
    mine = speed[w] if t[w] > 0 else float(speed[known].mean())
    return float(mine / speed[active].sum())


def total_samples(epochs: int, train_rows: int) -> int:
    """The shared budget: EPOCHS passes over the cluster's training rows."""
    return int(epochs) * int(train_rows)


def fair_steps(epochs: int, train_rows: int, n_workers: int, batch_size: int) -> int:
    """Steps of one worker's equal share of the budget (what '@P%' in a changing --slowdown counts)."""
    return max(1, -(-total_samples(epochs, train_rows) // (n_workers * batch_size)))
