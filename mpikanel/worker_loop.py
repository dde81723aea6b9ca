"""A worker's training loop: numba SGD steps on its shard, exchanging deltas with the server.

Transport-agnostic: it talks to any object with WorkerClient's ``delta``/``exchange``.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from .errors import TrainingError
from .hetero import Injector, sleep_for
from .kernels import BoundModel


class Exchanger(Protocol):
    """The part of comm.worker.WorkerClient the loop needs."""

    @property
    def delta(self) -> np.ndarray: ...

    def exchange(self, clock: int, steps: int, step_s: float, last: bool): ...


@dataclass
class WorkerStats:
    """Per-worker counters and timings for the run summary."""

    rank: int
    rows: int
    steps: int = 0
    pushes: int = 0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    injected_s: float = 0.0
    slowdown: float = 1.0
    produced: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    def public(self) -> dict:
        """JSON-ready dict (without the delta sum vector)."""
        d = asdict(self)
        d.pop("produced")
        return d


@dataclass(frozen=True)
class StepPlan:
    """How many SGD steps a worker takes and with which hyper-parameters."""

    epochs: int
    batch_size: int
    lr: float
    l2: float
    n_classes: int
    max_steps: int | None = None

    def steps_per_epoch(self, rows: int) -> int:
        """Minibatches in one pass over `rows` rows."""
        return max(1, math.ceil(rows / self.batch_size))

    def total_steps(self, rows: int) -> int:
        """Steps this worker takes in the whole run."""
        n = self.epochs * self.steps_per_epoch(rows)
        return n if self.max_steps is None else min(n, self.max_steps)


def batches(rows: int, plan: StepPlan, rng: np.random.Generator):
    """Yield int64 row-index arrays, reshuffled every epoch, total_steps of them."""
    per_epoch = plan.steps_per_epoch(rows)
    for step in range(plan.total_steps(rows)):
        b = step % per_epoch
        if b == 0:
            order = rng.permutation(rows).astype(np.int64)
        yield order[b * plan.batch_size:(b + 1) * plan.batch_size]


def run_worker(client: Exchanger, data: BoundModel, params: np.ndarray, plan: StepPlan,
               rng: np.random.Generator, rank: int, injector: Injector) -> tuple[np.ndarray, WorkerStats]:
    """Train on the bound shard, pushing after every step; returns the last local parameters and stats."""
    local = params.copy()
    base = params.copy()
    scratch = data.scratch()
    stats = WorkerStats(rank=rank, rows=data.rows, slowdown=injector.factor, produced=np.zeros_like(params))
    total = plan.total_steps(data.rows)
    delta = client.delta
    message_bytes = 8 * delta.size
    for step, idx in enumerate(batches(data.rows, plan, rng), start=1):
        t0 = time.perf_counter()
        data.step(local, idx, plan.lr, plan.l2, scratch)
        np.subtract(local, base, out=delta)
        t1 = time.perf_counter()
        stats.compute_s += t1 - t0
        if not math.isfinite(float(delta.sum())):
            raise TrainingError(f"worker rank {rank} produced non-finite parameters at step {step} "
                                f"(learning rate {plan.lr} too high?)")
        stats.produced += delta
        slow = injector.compute_delay(t1 - t0)
        injected = slow + injector.link_delay(message_bytes)
        sleep_for(injected)
        stats.injected_s += injected
        step_s = t1 - t0 + slow
        reply = client.exchange(step, 1, step_s, step == total)
        stats.steps += 1
        stats.pushes += 1
        stats.wait_s += reply.held_s
        stats.comm_s += max(0.0, reply.rtt_s - reply.held_s)
        local[:] = reply.params
        base[:] = reply.params
    return local, stats
