"""The keys a worker's steps changed since its last push, so a sparse push need not scan the model."""
from __future__ import annotations

import numpy as np

from ..kernels import BoundModel


class KeyTracker:
    """Marks the keys each step on CSR rows changes (the kernel's ``mark_keys``); ``take`` hands
    them over sorted at a push and starts afresh. Valid without L2 or with lazy L2 (eager L2
    changes every key at every step)."""

    def __init__(self, data: BoundModel, n_params: int) -> None:
        self.data = data
        self.mark = np.zeros(n_params, dtype=np.bool_)
        self.keys = np.empty(n_params, dtype=np.int64)
        self.n = 0

    @staticmethod
    def usable(data: BoundModel, l2: float, push_mode: str, lazy: bool = False) -> bool:
        """Whether a worker can track its keys: sparse frames, CSR rows of a csr_keys model, and no
        L2 or lazy L2."""
        return push_mode != "dense" and (l2 == 0.0 or lazy) and data.tracks_keys

    def add_rows(self, idx: np.ndarray) -> None:
        """A step on rows idx ran."""
        self.n = self.data.mark_keys(idx, self.mark, self.keys, self.n)

    def add_keys(self, keys: np.ndarray) -> None:
        """These keys changed too (a resumed worker's unsent work, a lazy decay flush)."""
        new = keys[~self.mark[keys]]
        self.mark[new] = True
        self.keys[self.n:self.n + new.size] = new
        self.n += new.size

    def current(self) -> np.ndarray:
        """The keys changed so far (unsorted view; valid until the next call)."""
        return self.keys[:self.n]

    def take(self) -> np.ndarray:
        """The keys changed since the last take, sorted; the tracker starts afresh."""
        keys = np.sort(self.keys[:self.n])
        self.mark[keys] = False
        self.n = 0
        return keys


class KeySet:
    """Keys of a vector of n marked since the last ``clear``, each once, up to `limit` of them:
    past that it holds every key (``full``) and marks nothing more. Its list grows as needed, so a
    set that stays small costs little beyond its n marks."""

    def __init__(self, n: int, limit: int | None = None) -> None:
        self.mark = np.zeros(n, dtype=np.bool_)
        self.limit = n if limit is None else limit
        self.keys = np.empty(min(self.limit, 1024), dtype=np.int64)
        self.n = 0
        self.full = False

    def add(self, keys: np.ndarray) -> None:
        """Mark these keys (repeats allowed)."""
        if self.full:
            return
        new = keys[~self.mark[keys]]
        if new.size == 0:
            return
        if new.size > 1 and not (new[1:] > new[:-1]).all():
            new = np.unique(new)       # repeats within keys
        if self.n + new.size > self.limit:
            self.full, self.keys = True, np.empty(0, dtype=np.int64)
            self.mark.fill(False)
            self.n = 0
            return
        self.mark[new] = True
        if self.n + new.size > self.keys.size:
            grown = np.empty(min(self.limit, max(2 * self.keys.size, self.n + new.size)), dtype=np.int64)
            grown[:self.n] = self.keys[:self.n]
            self.keys = grown
        self.keys[self.n:self.n + new.size] = new
        self.n += new.size

    def sorted(self) -> np.ndarray:
        """The marked keys, sorted (a new array; not for a full set)."""
        # the list is sorted runs (each add's keys, the last sort's result): a stable sort merges them
        keys = np.sort(self.keys[:self.n], kind="stable")
        self.keys[:self.n] = keys
        return keys

    def clear(self) -> None:
        """Unmark every key."""
        self.mark[self.keys[:self.n]] = False
        self.n = 0
        self.full = False
