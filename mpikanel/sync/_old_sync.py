"""Synchronization models as pure code over the server's book of worker clocks.

No MPI and no clock reads here: the server passes time in. Each policy answers one
question, ``release(book)``: which waiting workers get fresh parameters now.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError

SYNC_MODELS = ("bsp", "asp", "ssp", "esp", "psp")
AVAILABLE_SYNC_MODELS = SYNC_MODELS


@dataclass
class Book:
    """The server's record of every worker: clocks, who waits, who is still active."""

    n_workers: int
    clock: np.ndarray = field(init=False)       # pushes received from each worker
    waiting: np.ndarray = field(init=False)     # has a push the server has not answered
    active: np.ndarray = field(init=False)      # has not finished
    last_push: np.ndarray = field(init=False)   # the waiting push is the worker's last
    step_s: np.ndarray = field(init=False)      # latest reported compute seconds per step
    arrived_at: np.ndarray = field(init=False)  # server time the waiting push arrived
    base_version: np.ndarray = field(init=False)  # version the waiting push's delta was computed on
    steps: np.ndarray = field(init=False)       # local steps folded into the waiting push
    version: int = 0                            # pushes applied to the global parameters

    def __post_init__(self) -> None:
        n = self.n_workers
        self.clock = np.zeros(n, dtype=np.int64)
        self.waiting = np.zeros(n, dtype=bool)
        self.active = np.ones(n, dtype=bool)
        self.last_push = np.zeros(n, dtype=bool)
        self.step_s = np.zeros(n, dtype=np.float64)
        self.arrived_at = np.zeros(n, dtype=np.float64)
        self.base_version = np.zeros(n, dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)

    def record_push(self, w: int, clock: int, last: bool, step_s: float, now: float,
                    base_version: int = 0, steps: int = 1) -> None:
        """Note that worker w pushed at `clock` and now waits for an answer."""
        if not self.active[w] or self.waiting[w]:
            raise RuntimeError(f"protocol error: unexpected push from worker {w}")
        self.clock[w] = clock
        self.waiting[w] = True
        self.last_push[w] = last
        self.step_s[w] = step_s
        self.arrived_at[w] = now
        self.base_version[w] = base_version
        self.steps[w] = steps

    def record_release(self, w: int) -> None:
        """Note that worker w was answered; a worker whose last push it was leaves."""
        self.waiting[w] = False
        if self.last_push[w]:
            self.active[w] = False
            self.last_push[w] = False

    def min_active_clock(self) -> int:
        """Clock of the slowest active worker (0 when none is active)."""
        return int(self.clock[self.active].min()) if self.active.any() else 0

    @property
    def n_waiting(self) -> int:
        """Number of pushes waiting for an answer."""
        return int(self.waiting.sum())

    @property
    def finished(self) -> bool:
        """True once every worker has left."""
        return not self.active.any()


class SyncPolicy(ABC):
    """Server-side rule deciding which waiting workers are answered."""

    name: str = ""
    #: apply a delta as soon as it arrives (else at release, in rank order)
    apply_on_arrival: bool = True
    #: every worker steps in lockstep: budget leases are split equally, not by measured speed,
    #: so nothing timing-dependent enters the result (BSP stays bitwise reproducible)
    lockstep: bool = False

    @abstractmethod
    def release(self, book: Book) -> list[int]:
        """Workers (ascending index) to answer now."""

    def on_push(self, book: Book, w: int) -> None:
        """Called after worker w's push is recorded in the book (PSP learns from it)."""

    def plan(self, book: Book, w: int) -> int:
        """Local steps worker w runs before its next push."""
        return 1

    def delta_scale(self, book: Book, w: int) -> float:
        """Factor applied to worker w's waiting delta when it is added to the parameters."""
        return 1.0

    def state(self) -> dict:
        """JSON-able state a checkpoint keeps (stateless policies: empty)."""
        return {}

    def restore(self, state: dict) -> None:
        """Continue from a checkpointed state()."""

    def describe(self) -> str:
        """Human-readable name with parameters."""
        return self.name.upper()


class BSP(SyncPolicy):
    """Bulk synchronous: everyone waits until every active worker has pushed the same clock.

    Deltas are applied at release in rank order, so the result is independent of
    arrival order (bitwise reproducible).
    """

    name = "bsp"
    apply_on_arrival = False
    lockstep = True

    def release(self, book: Book) -> list[int]:
        waiting_active = book.waiting & book.active
        if not waiting_active.any() or (book.active & ~book.waiting).any():
            return []
        return [int(w) for w in np.flatnonzero(waiting_active)]


class ASP(SyncPolicy):
    """Fully asynchronous: every push is answered at once."""

    name = "asp"

    def release(self, book: Book) -> list[int]:
        return [int(w) for w in np.flatnonzero(book.waiting)]


class SSP(SyncPolicy):
    """Stale synchronous: a worker at clock c waits until the slowest active clock >= c - s."""

    name = "ssp"

    def __init__(self, staleness: float) -> None:
        if staleness < 0:
            raise InputError(f"--staleness must be >= 0, got {staleness}")
        self.staleness = staleness

    def release(self, book: Book) -> list[int]:
        if not book.waiting.any():
            return []
        floor = book.min_active_clock()
        ok = book.waiting & (book.clock - floor <= self.staleness)
        return [int(w) for w in np.flatnonzero(ok)]

    def describe(self) -> str:
        s = "inf" if math.isinf(self.staleness) else f"{self.staleness:g}"
        return f"SSP(s={s})"


class ESP(SSP):
    """Efficient synchronous parallel, server side: SSP's staleness bound over push clocks.

    Workers decide themselves when to communicate (mpikanel.schedule.EspSchedule); the server
    bounds how far a worker's pushes may run ahead of the slowest active worker and can scale
    a stale delta by 1/(1+tau), tau = versions applied since the worker's base.
    """

    name = "esp"
    SCALES = ("none", "inverse")

    def __init__(self, staleness: float, scale: str = "none") -> None:
        super().__init__(staleness)
        if scale not in self.SCALES:
            raise InputError(f"--esp-scale must be one of {', '.join(self.SCALES)}, got '{scale}'")
        self.scale = scale

    def delta_scale(self, book: Book, w: int) -> float:
        if self.scale == "none":
            return 1.0
        return 1.0 / (1.0 + max(0, book.version - int(book.base_version[w])))

    def describe(self) -> str:
        return "ESP" + super().describe()[3:]


def make_policy(sync: str, staleness: float = 3, esp_scale: str = "none", n_workers: int = 1,
                psp_k_max: int = 8, psp_aggregate: str = "sum") -> SyncPolicy:
    """Build the server-side policy for a sync model name."""
    sync = sync.lower()
    if sync == "bsp":
        return BSP()
    if sync == "asp":
        return ASP()
    if sync == "ssp":
        return SSP(staleness)
    if sync == "esp":
        return ESP(staleness, esp_scale)
    if sync == "psp":
        from .psp import PSP
        return PSP(n_workers, psp_k_max, psp_aggregate)
    raise InputError(f"unknown --sync '{sync}'; choose from: {', '.join(SYNC_MODELS)}")
