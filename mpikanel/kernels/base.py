"""The Model record every kernel module fills in, the CSR container, and helpers shared by models.

Kernel conventions (one compiled numba signature serves every call):
  w        float64 1-D C-contiguous flat parameter vector
  X        float32 2-D C-contiguous (rows, n_features)                       (dense kernels)
  indptr, indices, data   int64 / int32 / float32 CSR arrays of the rows     (CSR kernels)
  y        int32 1-D class labels 0..C-1
  idx      int64 1-D row indices of the minibatch
  lr, l2   Python floats
  n_classes  Python int
  scratch  float64 1-D of model.scratch_size(n_features, n_classes); kernels never read what a
           previous call left there

Dense kernels:  sgd_step(w, X, y, idx, lr, l2, C, scratch), loss_sum(w, X, y, C), predict(w, X, C)
CSR kernels:    sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch),
                sgd_step_csr_lazy(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, stamps, prod)
                (optional: lazy L2, see lazy.py),
                loss_sum_csr(w, indptr, indices, data, d, y, C), predict_csr(w, indptr, indices, data, d, C)
where d is the number of features (columns).

Every model lays parameters out as "all L2-regularised weights first, then the biases";
``Model.n_weights(d, C)`` is the length of the regularised head.

On CSR rows of a ``csr_keys`` model a worker tracks the keys its steps change (the minibatch's
columns' weight rows plus the biases) and pushes only those; with l2 > 0 that needs lazy decay
(``sgd_step_csr_lazy``, lazy.py), since an eager step changes every weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..layout import linear_n_weights, weights_per_feature


@dataclass(frozen=True)
class CSR:
    """Compressed sparse rows: indptr int64 (rows+1), indices int32, data float32, shape (rows, cols)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "indptr", np.ascontiguousarray(self.indptr, dtype=np.int64))
        object.__setattr__(self, "indices", np.ascontiguousarray(self.indices, dtype=np.int32))
        object.__setattr__(self, "data", np.ascontiguousarray(self.data, dtype=np.float32))
        object.__setattr__(self, "shape", (int(self.shape[0]), int(self.shape[1])))
        if self.indptr.shape != (self.shape[0] + 1,) or self.indices.shape != self.data.shape:
            raise ValueError("CSR: indptr must have rows+1 entries and indices/data the same length")
        if self.indptr[0] != 0 or self.indptr[-1] != self.indices.size:
            raise ValueError("CSR: indptr must start at 0 and end at nnz")

    @property
    def nnz(self) -> int:
        """Number of stored entries."""
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Bytes held by the three arrays."""
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def rows(self, start: int, stop: int) -> "CSR":
        """Rows [start, stop) as a new CSR (arrays copied, indptr rebased)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        return CSR(self.indptr[start:stop + 1] - lo, self.indices[lo:hi].copy(), self.data[lo:hi].copy(),
                   (stop - start, self.shape[1]))

    def toarray(self) -> np.ndarray:
        """Dense float32 copy (tests and small data only)."""
        out = np.zeros(self.shape, dtype=np.float32)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        np.add.at(out, (rows, self.indices), self.data)
        return out

    @classmethod
    def from_dense(cls, X: np.ndarray) -> "CSR":
        """CSR of the nonzeros of a dense 2-D array."""
        X = np.asarray(X)
        rows, cols = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(indptr, cols, X[rows, cols], X.shape)

    def to_scipy(self):
        """A scipy.sparse.csr_matrix sharing nothing (needs scipy)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


def _zeros_init(n_params: int, n_features: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Default initial parameters: all zeros."""
    return np.zeros(n_params, dtype=np.float64)


def _no_hyper(model: "Model", **hyper: object) -> "Model":
    """Models without hyper-parameters ignore them."""
    return model


@dataclass(frozen=True)
class Model:
    """A trainable model: parameter/scratch sizing plus its numba kernels (dense and optional CSR)."""

    name: str
    min_classes: int
    max_classes: int | None
    n_params: Callable[[int, int], int]
    scratch_size: Callable[[int, int], int]
    sgd_step: Callable  # sgd_step(w, X, y, idx, lr, l2, n_classes, scratch) -> None
    loss_sum: Callable  # loss_sum(w, X, y, n_classes) -> float (sum over rows, no L2)
    predict: Callable  # predict(w, X, n_classes) -> int32 array
    n_weights: Callable[[int, int], int] | None = None  # regularised head length (default: linear layout)
    sgd_step_csr: Callable | None = None  # sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch)
    loss_sum_csr: Callable | None = None  # loss_sum_csr(w, indptr, indices, data, d, y, C) -> float
    predict_csr: Callable | None = None  # predict_csr(w, indptr, indices, data, d, C) -> int32 array
    # sgd_step_csr's update with lazy L2 (kernels/lazy.py): (..., scratch, stamps, prod); None: eager decay
    sgd_step_csr_lazy: Callable | None = None
    init: Callable[[int, int, int, np.random.Generator], np.ndarray] = _zeros_init
    configure: Callable[..., "Model"] = field(default=_no_hyper, repr=False)
    # the CSR step without L2 changes only the keys of its rows' columns (col * U + u, linear layout)
    # and the U biases: a worker can then track what it changed instead of scanning the vector
    csr_keys: bool = False
    description: str = ""
    # False for models whose step/loss/predict are plain Python (mpikanel.models): nothing to warm up
    compiled: bool = True
    source: object = field(default=None, repr=False, compare=False)   # the GradientModel behind it, if any

    @property
    def supports_csr(self) -> bool:
        """True when the model has CSR kernels."""
        return self.sgd_step_csr is not None and self.loss_sum_csr is not None and self.predict_csr is not None

    def head(self, n_features: int, n_classes: int) -> int:
        """Number of leading parameters that L2 regularises."""
        if self.n_weights is not None:
            return int(self.n_weights(n_features, n_classes))
        return linear_n_weights(int(self.n_params(n_features, n_classes)), n_features)

    def with_hyper(self, **hyper: object) -> "Model":
        """This model configured with hyper-parameters (hidden=, activation=); others ignore them."""
        return self.configure(self, **hyper)


def l2_penalty(w: np.ndarray, n_features: int, n_classes: int, l2: float) -> float:
    """Return 0.5*l2*||weights||^2 over the weights of a linear layout, excluding biases."""
    n_w = linear_n_weights(int(w.shape[0]), n_features)
    head = np.asarray(w[:n_w], dtype=np.float64)
    return 0.5 * float(l2) * float(np.dot(head, head))


@dataclass(frozen=True)
class BoundModel:
    """A model bound to one block of data (dense float32 rows or CSR): the calls training and evaluation make."""

    model: Model
    X: np.ndarray | CSR
    y: np.ndarray
    n_classes: int

    @property
    def sparse(self) -> bool:
        """True when bound to CSR rows."""
        return isinstance(self.X, CSR)

    @property
    def rows(self) -> int:
        """Number of rows bound."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of feature columns."""
        return int(self.X.shape[1])

    def scratch(self) -> np.ndarray:
        """A fresh scratch buffer for step()."""
        return np.zeros(self.model.scratch_size(self.n_features, self.n_classes))

    def step(self, w: np.ndarray, idx: np.ndarray, lr: float, l2: float, scratch: np.ndarray) -> None:
        """One minibatch SGD step on rows idx, updating w in place."""
        X = self.X
        if isinstance(X, CSR):
            self.model.sgd_step_csr(w, X.indptr, X.indices, X.data, X.shape[1], self.y, idx, lr, l2,
                                    self.n_classes, scratch)
        else:
            self.model.sgd_step(w, X, self.y, idx, lr, l2, self.n_classes, scratch)

    @property
    def tracks_keys(self) -> bool:
        """True when a step's changed keys follow from its rows (CSR rows, a csr_keys model)."""
        return self.sparse and self.model.csr_keys

    def mark_keys(self, idx: np.ndarray, mark: np.ndarray, keys: np.ndarray, n: int) -> int:
        """Append the keys a step on rows idx changes (without L2) that ``mark`` lacks; the new count."""
        from ._linear import mark_csr_keys

        X = self.X
        units = weights_per_feature(mark.size, X.shape[1])
        return int(mark_csr_keys(X.indptr, X.indices, idx, units, X.shape[1], mark, keys, n))

    def loss_sum(self, w: np.ndarray) -> float:
        """Sum of per-row losses (no L2 term)."""
        if not self.rows:
            return 0.0
        X = self.X
        if isinstance(X, CSR):
            return float(self.model.loss_sum_csr(w, X.indptr, X.indices, X.data, X.shape[1], self.y,
                                                 self.n_classes))
        return float(self.model.loss_sum(w, X, self.y, self.n_classes))

    def predict(self, w: np.ndarray) -> np.ndarray:
        """Predicted class per row (int32)."""
        X = self.X
        if not self.rows:
            return np.zeros(0, dtype=np.int32)
        if isinstance(X, CSR):
            return self.model.predict_csr(w, X.indptr, X.indices, X.data, X.shape[1], self.n_classes)
        return self.model.predict(w, X, self.n_classes)

    def correct(self, w: np.ndarray) -> int:
        """Number of rows predicted right."""
        return int((self.predict(w) == self.y).sum()) if self.rows else 0


def bind(model: Model, X: np.ndarray | CSR, y: np.ndarray, n_classes: int) -> BoundModel:
    """Bind a model's kernels to dense float32 rows or a CSR block (dispatching to its CSR kernels)."""
    if isinstance(X, CSR):
        if not model.supports_csr:
            from ..errors import InputError

            raise InputError(f"model {model.name} has no CSR kernels; use dense data (.npz/.h5) for it")
    else:
        X = np.ascontiguousarray(X, dtype=np.float32)
    return BoundModel(model, X, np.ascontiguousarray(y, dtype=np.int32), int(n_classes))
