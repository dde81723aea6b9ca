"""ASP, fully asynchronous: every push is applied and answered at once."""
from __future__ import annotations

import numpy as np

from .book import Book
from .policy import SyncPolicy
from .schedule import Schedule


class ASP(SyncPolicy):
    """Fully asynchronous: every push is answered at once."""

    name = "asp"

    def release(self, book: Book) -> list[int]:
        return [int(w) for w in np.flatnonzero(book.waiting)]


def make(config, n_workers: int) -> tuple[ASP, Schedule]:
    """ASP's server policy and worker schedule for a config."""
    return ASP(), Schedule()
