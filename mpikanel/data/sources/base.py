"""What every data source provides, and the shape checks of array files."""

from __future__ import annotations

import numpy as np

from mpikanel.errors import InputError


class Source:
    """A data source: rows read by range, with a name to point at bad ones."""

    name: str
    description: str
    n_rows: int
    n_features: int
    fixed_classes: tuple | None = None
    features_cause: str = ""    # why n_features is what it is, when a single entry decides it

    def where(self, row: int) -> str:
        """Human-readable location of global row `row`."""
        return f"row {row}"

    def all_labels(self) -> np.ndarray:
        """All raw labels of the source."""
        raise NotImplementedError

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw features and labels of rows [start, stop)."""
        raise NotImplementedError


def check_x_shape(name: str, shape: tuple, dtype: np.dtype) -> None:
    """Raise InputError unless X is a non-empty 2-D numeric array."""
    if len(shape) != 2:
        raise InputError(f"{name}: X must be 2-D, got shape {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise InputError(f"{name}: data is empty (X has shape {shape})")
    if dtype.kind not in "biuf":
        raise InputError(f"{name}: X has unsupported dtype {dtype}; expected numbers")


def check_y_shape(name: str, y_shape: tuple, n_rows: int) -> None:
    """Raise InputError unless y is 1-D with one label per row of X."""
    if len(y_shape) != 1:
        raise InputError(f"{name}: y must be 1-D, got shape {y_shape}")
    if y_shape[0] != n_rows:
        raise InputError(f"{name}: y has {y_shape[0]} labels but X has {n_rows} rows")
