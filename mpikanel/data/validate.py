"""Checks of the rows read: finite features, integer labels, labels mapped to the training classes."""

from __future__ import annotations

import numpy as np

from mpikanel.errors import InputError
from mpikanel.kernels.base import CSR

from .sources import Source


def check_finite(X: np.ndarray, src: Source, offset: int) -> None:
    """Raise InputError at the first row with a NaN or infinite feature."""
    finite_rows = np.isfinite(X).all(axis=1)
    if not finite_rows.all():
        row = offset + int(np.flatnonzero(~finite_rows)[0])
        raise InputError(f"{src.name}: non-finite feature value (NaN/inf) at {src.where(row)}")


def check_finite_csr(X: CSR, src: Source, offset: int) -> None:
    """Raise InputError at the first CSR row with a NaN or infinite value."""
    bad = ~np.isfinite(X.data)
    if bad.any():
        row = offset + int(np.searchsorted(X.indptr, int(np.flatnonzero(bad)[0]), "right") - 1)
        raise InputError(f"{src.name}: non-finite feature value (NaN/inf) at {src.where(row)}")


def integer_labels(y: np.ndarray, src: Source, offset: int) -> np.ndarray:
    """Check labels are integer-valued and return them as int64."""
    if y.dtype.kind in "biu":
        return y.astype(np.int64)
    if y.dtype.kind != "f":
        raise InputError(f"{src.name}: y has unsupported dtype {y.dtype}; labels must be integers")
    bad = ~np.isfinite(y) | (y != np.round(y))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if np.isnan(y[i]):
            raise InputError(f"{src.name}: no label at {src.where(offset + i)}; training needs a label on every row")
        raise InputError(f"{src.name}: y has non-integer label {y[i]:g} at {src.where(offset + i)}")
    return y.astype(np.int64)


def map_labels(y: np.ndarray, label_values: tuple, src: Source, offset: int) -> np.ndarray:
    """Map original labels to class indices; a label unseen in training is an InputError."""
    values = np.asarray(label_values, dtype=np.int64)
    idx = np.searchsorted(values, y)
    idx_clipped = np.minimum(idx, len(values) - 1)
    unseen = values[idx_clipped] != y
    if unseen.any():
        i = int(np.flatnonzero(unseen)[0])
        shown = ", ".join(str(v) for v in label_values[:20]) + (", ..." if len(values) > 20 else "")
        raise InputError(
            f"{src.name}: label {int(y[i])} at {src.where(offset + i)} "
            f"does not occur in the training labels ({shown})"
        )
    return idx_clipped.astype(np.int32)
