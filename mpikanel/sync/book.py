"""The server's book of workers: clocks, who waits, who is still active."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
    def finished(self) -> bool:
        """True once every worker has left."""
        return not self.active.any()
