"""The Model record every kernel module fills in, plus helpers shared by linear models.

Kernel conventions (one compiled numba signature serves every call):
  w        float64 1-D C-contiguous flat parameter vector
  X        float32 2-D C-contiguous (rows, n_features)
  y        int32 1-D class labels 0..C-1
  idx      int64 1-D row indices of the minibatch in X
  lr, l2   Python floats
  n_classes  Python int
  scratch  float64 1-D of model.scratch_size(n_features, n_classes)

Linear models lay parameters out as "all weights first, then one bias per output unit";
l2_penalty relies on that layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Model:
    """A trainable model: parameter/scratch sizing plus its numba kernels."""

    name: str
    min_classes: int
    max_classes: int | None
    n_params: Callable[[int, int], int]
    scratch_size: Callable[[int, int], int]
    sgd_step: Callable  # sgd_step(w, X, y, idx, lr, l2, n_classes, scratch) -> None
    loss_sum: Callable  # loss_sum(w, X, y, n_classes) -> float (sum over rows, no L2)
    predict: Callable  # predict(w, X, n_classes) -> int32 array


def linear_n_weights(w_len: int, n_features: int) -> int:
    """Number of regularised weights in a linear layout of k units each with n_features weights + 1 bias."""
    if n_features < 1 or w_len % (n_features + 1) != 0:
        raise ValueError(
            f"parameter vector of length {w_len} is not a linear layout for {n_features} features"
        )
    return (w_len // (n_features + 1)) * n_features


def l2_penalty(w: np.ndarray, n_features: int, n_classes: int, l2: float) -> float:
    """Return 0.5*l2*||weights||^2 over the weights of a linear layout, excluding biases."""
    n_w = linear_n_weights(int(w.shape[0]), n_features)
    head = np.asarray(w[:n_w], dtype=np.float64)
    return 0.5 * float(l2) * float(np.dot(head, head))


@dataclass(frozen=True)
class BoundModel:
    """A model bound to one block of data: the calls the training loop and evaluation make.

    Dense float32 rows today; a CSR variant binds the model's CSR kernels behind the same calls.
    """

    model: Model
    X: np.ndarray
    y: np.ndarray
    n_classes: int

    @property
    def rows(self) -> int:
        """Number of rows bound."""
        return int(self.X.shape[0])

    def scratch(self) -> np.ndarray:
        """A fresh scratch buffer for step()."""
        return np.zeros(self.model.scratch_size(self.X.shape[1], self.n_classes))

    def step(self, w: np.ndarray, idx: np.ndarray, lr: float, l2: float, scratch: np.ndarray) -> None:
        """One minibatch SGD step on rows idx, updating w in place."""
        self.model.sgd_step(w, self.X, self.y, idx, lr, l2, self.n_classes, scratch)

    def loss_sum(self, w: np.ndarray) -> float:
        """Sum of per-row losses (no L2 term)."""
        return float(self.model.loss_sum(w, self.X, self.y, self.n_classes)) if self.rows else 0.0

    def correct(self, w: np.ndarray) -> int:
        """Number of rows predicted right."""
        return int((self.model.predict(w, self.X, self.n_classes) == self.y).sum()) if self.rows else 0


def bind(model: Model, X: np.ndarray, y: np.ndarray, n_classes: int) -> BoundModel:
    """Bind a model's kernels to data."""
    return BoundModel(model, X, y, int(n_classes))
