"""Sparse push/pull, without MPI: when a frame goes sparse, how keys and values are packed into
its payload, and which keys changed since a version (what a sparse reply must carry).

A sparse frame's payload is ``[int64 keys x nnz | float64 values x nnz]`` (keys local to the
receiving server's range, sorted, unique); a dense one is the whole range as float64. A sparse
frame costs 16 bytes per key against 8 per parameter, so ``auto`` goes sparse below half.
A :class:`KeyedVector` is a vector given by its nonzero keys and values (a tracked worker's
checkpoint arrays).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

#: a checkpointed float64 vector with at most this fraction of nonzero entries is stored as its keys
#: and values (and a tracked worker's part beyond it is written whole)
SPARSE_AT = 0.25
#: --push choices: auto picks per frame (sparse when smaller); dense and sparse force one
PUSH_MODES = ("auto", "dense", "sparse")


def effective_mode(mode: str, sparse_data: bool) -> str:
    """The frames a run uses: ``auto`` on dense data keeps whole-vector frames (sent without a copy)."""
    if mode not in PUSH_MODES:
        raise ValueError(f"push mode {mode!r}: expected one of {', '.join(PUSH_MODES)}")
    return "dense" if mode == "auto" and not sparse_data else mode


def use_sparse(mode: str, nnz: int, n: int) -> bool:
    """Whether a frame with `nnz` changed keys out of a range of `n` goes sparse."""
    if mode == "dense":
        return False
    if mode == "sparse":
        return True
    return 2 * nnz < n


def capacity(mode: str, n: int) -> int:
    """Float64 slots a frame's payload needs for a range of `n` keys (forced sparse may need 2n)."""
    return 2 * n if mode == "sparse" else n


def payload_nbytes(sparse: bool, nnz: int, n: int) -> int:
    """Bytes of a payload: nnz keys and values, or the whole range of n."""
    return 16 * nnz if sparse else 8 * n


def pack(payload: np.ndarray, keys: np.ndarray, values: np.ndarray) -> None:
    """Write keys (their int64 bits) then values into the front of a float64 payload."""
    m = keys.size
    payload[:m].view(np.int64)[:] = keys
    payload[m:2 * m] = values


def unpack(payload: np.ndarray, nnz: int) -> tuple[np.ndarray, np.ndarray]:
    """The (keys, values) views of a sparse payload with nnz entries."""
    return payload[:nnz].view(np.int64), payload[nnz:2 * nnz]


class KeyLog:
    """Which keys of a range changed at which version, so a reply can carry only those.

    ``record(version, keys)`` after each apply (``keys=None``: a dense apply, every key);
    ``since(v)`` gives the sorted keys changed after version ``v``, or None when a dense reply
    is needed (a dense apply since ``v``, or the log no longer reaches back that far). The log
    keeps at most ``limit`` keys in all (default: the range's size: past that a dense reply is
    smaller anyway).
    """

    def __init__(self, n: int, version: int = 0, limit: int | None = None) -> None:
        self.n = n
        self.limit = n if limit is None else limit
        self.floor = version            # since(v) for v < floor needs a dense reply
        self.entries: deque[tuple[int, np.ndarray]] = deque()
        self.size = 0

    def record(self, version: int, keys: np.ndarray | None) -> None:
        """The apply that made `version` changed these keys (None: all of them)."""
        if keys is None:
            self.entries.clear()
            self.size = 0
            self.floor = version
            return
        self.entries.append((version, np.array(keys, dtype=np.int64)))    # a copy: keys may view a frame
        self.size += keys.size
        while self.size > self.limit and self.entries:
            v, old = self.entries.popleft()
            self.size -= old.size
            self.floor = v

    def since(self, version: int) -> np.ndarray | None:
        """Sorted unique keys changed after `version`, or None (send the whole range)."""
        if version < self.floor:
            return None
        parts = [k for v, k in self.entries if v > version]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        if len(parts) == 1:
            return parts[0]
        keys = np.sort(np.concatenate(parts))      # a sort and a dedupe: np.unique hashes first (slower)
        return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys


class ReplyKeys:
    """What a server's replies carry under a push mode: the keys of its range changed since each
    worker's last reply (a KeyLog plus the version each worker holds), or None for the whole range."""

    def __init__(self, mode: str, n: int, n_workers: int, version: int = 0) -> None:
        self.mode = mode
        self.log = KeyLog(n, version) if mode != "dense" else None
        self.held = np.full(n_workers, version, dtype=np.int64)   # version of each worker's copy

    def applied(self, version: int, keys: np.ndarray | None) -> None:
        """An apply made `version`, changing these keys (None: all)."""
        if self.log is not None:
            self.log.record(version, keys)

    def reply(self, w: int, version: int) -> np.ndarray | None:
        """Keys a reply to worker w at `version` carries (None: the whole range); it then holds `version`."""
        last, self.held[w] = int(self.held[w]), version
        if self.log is None:
            return None
        keys = self.log.since(last)
        return keys if keys is not None and use_sparse(self.mode, keys.size, self.log.n) else None


@dataclass(frozen=True, eq=False)
class KeyedVector:
    """A float64 vector of `size` given by its nonzero entries: sorted keys and their values
    (every other entry is +0.0; -0.0 counts as nonzero). ``np.asarray`` gives the dense vector."""

    size: int
    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def at(cls, size: int, keys: np.ndarray, values: np.ndarray) -> "KeyedVector":
        """The vector holding `values` at the sorted `keys` (zero ones dropped) and +0.0 elsewhere."""
        nz = values.view(np.int64) != 0
        return cls(size, keys[nz], values[nz])

    def dense(self) -> np.ndarray:
        """The whole vector."""
        out = np.zeros(self.size)
        out[self.keys] = self.values
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)
