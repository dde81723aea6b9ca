"""SSP, stale synchronous: a worker may run at most s pushes ahead of the slowest active one."""
from __future__ import annotations

import math

import numpy as np

from .book import Book
from .options import Bound, Option
from .policy import SyncPolicy
from .schedule import Schedule

STALENESS = Option("staleness", float, 3.0, "SSP staleness bound s (0 = BSP, inf = ASP)",
                   bound=Bound(0, note="(or inf)"))
OPTIONS = (STALENESS,)


class SSP(SyncPolicy):
    """Stale synchronous: a worker at clock c waits until the slowest active clock >= c - s."""

    name = "ssp"

    def __init__(self, staleness: float) -> None:
        STALENESS.check(staleness)
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


def make(config, n_workers: int) -> tuple[SSP, Schedule]:
    """SSP's server policy and worker schedule for a config."""
    return SSP(config.staleness), Schedule()
