"""A tracked worker's checkpoint part from the keys it touched: its unsent work, produced sum and
lazy-L2 stamps as :class:`~mpikanel.engine.sparse.KeyedVector`, with no pass over a model-sized
vector at the cut (the part holds the same vectors as a dense capture's, bitwise)."""
from __future__ import annotations

import numpy as np

from ..kernels import LazyDecay
from .key_tracker import KeySet, KeyTracker
from .sparse import SPARSE_AT, KeyedVector


class PartKeys:
    """The keys where a tracked worker's part can be nonzero: every key it pushed (its produced
    sum), and with lazy L2 every feature its steps caught up since the last flush (its stamps); its
    unsent work's are the tracker's keys since the last push. A vector with more such keys than a
    part stores sparse (SPARSE_AT) goes to the part whole, as an untracked worker's does."""

    def __init__(self, n_params: int, lazy: LazyDecay | None = None) -> None:
        self.produced = KeySet(n_params, limit=int(SPARSE_AT * n_params))
        self.lazy = lazy
        self.stamped = KeySet(lazy.stamps.size, limit=int(SPARSE_AT * lazy.stamps.size)) if lazy is not None else None

    @classmethod
    def seeded(cls, produced: np.ndarray, lazy: LazyDecay | None = None) -> "PartKeys":
        """The keys of a worker's state so far (a resumed one's): one pass, when tracking starts."""
        keys = cls(produced.size, lazy)
        keys.produced.add(np.flatnonzero(produced.view(np.int64)))
        if lazy is not None:
            keys.stamped.add(np.flatnonzero(lazy.stamps != 1.0))
        return keys

    def stepped(self, keys: np.ndarray) -> None:
        """Steps changed these keys (lazy L2: they caught up the keys' features)."""
        if self.stamped is not None:
            units = self.lazy.units
            features = keys[keys < self.lazy.stamps.size * units]
            features = features // units if units > 1 else features
            # a stamp leaves 1.0 only at a step's catch-up (its keys come here again) or a rebase
            # (flagged): a feature at 1.0 now, one a flush just reset, needs no place in the part
            self.stamped.add(features[self.lazy.stamps[features] != 1.0])

    def pushed(self, keys: np.ndarray) -> None:
        """A push carried nonzero deltas at these keys (into the produced sum)."""
        self.produced.add(keys)

    def flushed(self) -> None:
        """Every pending lazy decay was applied: every stamp is 1.0 again."""
        if self.stamped is not None:
            self.stamped.clear()

    def encode(self, local: np.ndarray, base: np.ndarray, produced: np.ndarray, tracker: KeyTracker) -> dict:
        """The part's arrays: ``unsent`` (local - base), ``produced`` and, with lazy L2,
        ``lazy_stamps`` (``LazyDecay.saved``'s form), read at the touched keys only."""
        keys = np.sort(tracker.current())
        part = {"unsent": KeyedVector.at(local.size, keys, local[keys] - base[keys])}
        if self.produced.full:
            part["produced"] = produced
        else:
            keys = self.produced.sorted()
            part["produced"] = KeyedVector.at(produced.size, keys, produced[keys])
        if self.lazy is not None:
            self.stepped(tracker.current())
            if self.lazy.rebased or self.stamped.full:
                # a rebase moved every stamp off 1.0 (or too many moved): the stamps go whole
                part["lazy_stamps"] = self.lazy.saved()[0]
            else:
                keys = self.stamped.sorted()
                stamps = self.lazy.stamps[keys]
                part["lazy_stamps"] = KeyedVector.at(self.lazy.stamps.size, keys,
                                                     np.where(stamps == 1.0, 0.0, stamps))
        return part
