"""BSP, bulk synchronous: a barrier every step; deltas added in rank order (bitwise reproducible)."""
from __future__ import annotations

import numpy as np

from .book import Book
from .policy import SyncPolicy
from .schedule import Schedule


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


def make(config, n_workers: int) -> tuple[BSP, Schedule]:
    """BSP's server policy and worker schedule for a config."""
    return BSP(), Schedule()
