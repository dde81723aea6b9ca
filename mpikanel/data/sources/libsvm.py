"""libsvm/svmlight text files."""

from __future__ import annotations

import array
import functools
import math
import os

import numpy as np

from mpikanel.errors import InputError
from mpikanel.kernels.base import CSR

from .base import Source


class Libsvm(Source):
    """libsvm/svmlight text, parsed whole; row ranges come out as CSR (never densified)."""

    def __init__(self, path: str, n_features: int | None, base: int | None, role: str) -> None:
        self.name = self.description = path
        st = os.stat(path)
        self.labels, self.lines, self.row_ptr, self.cols, self.vals = _parse_libsvm(
            path, st.st_size, st.st_mtime_ns
        )
        self.n_rows = len(self.labels)
        if self.n_rows == 0:
            raise InputError(f"{path}: data is empty (no data lines)")
        has_zero = bool(self.cols.size) and int(self.cols.min()) == 0
        self.index_base = base if base is not None else (0 if has_zero else 1)
        if self.index_base == 1 and has_zero:
            line = self._line_of_entry(int(np.flatnonzero(self.cols == 0)[0]))
            raise InputError(
                f"{path}:{line}: feature index 0, but the train file uses 1-based indices"
            )
        max_index = int(self.cols.max()) if self.cols.size else self.index_base - 1
        needed = max_index + 1 - self.index_base
        if n_features is None:
            if needed == 0:
                raise InputError(f"{path}: data is empty (no feature values)")
            self.n_features = needed
            line = self._line_of_entry(int(np.argmax(self.cols)))
            self.features_cause = f"feature index {max_index} in {path} line {line}"
        elif needed > n_features:
            line = self._line_of_entry(int(np.argmax(self.cols)))
            if role == "test":
                raise InputError(
                    f"feature-count mismatch: train has {n_features} features, "
                    f"test ({path}) has {needed} (index {max_index} at line {line})"
                )
            raise InputError(
                f"{path}:{line}: feature index {max_index} exceeds n_features={n_features}"
            )
        else:
            self.n_features = n_features
            self.features_cause = f"--n-features {n_features}"

    def _line_of_entry(self, entry: int) -> int:
        """Line number of the row holding CSR entry `entry`."""
        return int(self.lines[np.searchsorted(self.row_ptr, entry, "right") - 1])

    def where(self, row: int) -> str:
        return f"row {row} (line {self.lines[row]})"

    def all_labels(self) -> np.ndarray:
        return self.labels

    def read(self, start: int, stop: int) -> tuple[CSR, np.ndarray]:  # type: ignore[override]
        lo, hi = int(self.row_ptr[start]), int(self.row_ptr[stop])
        X = CSR(self.row_ptr[start : stop + 1] - lo, self.cols[lo:hi] - self.index_base,
                self.vals[lo:hi], (stop - start, self.n_features))
        return X, self.labels[start:stop]


@functools.lru_cache(maxsize=4)
def _parse_libsvm(path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, ...]:
    """Parse a libsvm file into labels, line numbers and CSR arrays (cached by path+stat)."""
    del size, mtime_ns  # part of the cache key only
    # line by line into C arrays (8 or 4 bytes an entry; a Python list of numbers takes ~40)
    labels = array.array("d")
    lines = array.array("q")
    row_ptr = array.array("q", [0])
    cols = array.array("q")
    vals = array.array("f")
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                tokens = line.split("#", 1)[0].split()
                if not tokens:
                    continue
                labels.append(_parse_label(tokens[0], path, lineno))
                for tok in tokens[1:]:
                    if tok.startswith("qid:"):
                        continue
                    idx, val = _parse_pair(tok, path, lineno)
                    cols.append(idx)
                    vals.append(val)
                lines.append(lineno)
                row_ptr.append(len(cols))
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (and not .npz/.h5/.hdf5)") from None
    # frombuffer: the arrays' memory becomes the numpy arrays' (no second copy at the peak)
    return (
        np.frombuffer(labels, dtype=np.float64),
        np.frombuffer(lines, dtype=np.int64),
        np.frombuffer(row_ptr, dtype=np.int64),
        np.frombuffer(cols, dtype=np.int64),
        np.frombuffer(vals, dtype=np.float32),
    )


#: libsvm label tokens that stand for "no label" (rows to predict); they read as NaN
LABEL_PLACEHOLDERS = ("?", "nan", "NaN", "NA")


def _parse_label(tok: str, path: str, lineno: int) -> float:
    if tok in LABEL_PLACEHOLDERS:
        return math.nan
    try:
        return float(tok)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad label {tok!r} (expected a number)") from None


def _parse_pair(tok: str, path: str, lineno: int) -> tuple[int, float]:
    idx_s, sep, val_s = tok.partition(":")
    if not sep:
        raise InputError(f"{path}:{lineno}: expected index:value, got {tok!r}")
    try:
        idx = int(idx_s)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad feature index {idx_s!r} in {tok!r}") from None
    if idx < 0:
        raise InputError(f"{path}:{lineno}: negative feature index {idx}")
    try:
        return idx, float(val_s)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad feature value {val_s!r} in {tok!r}") from None
