"""GradientModel: a model given as plain Python functions over the flat parameter vector.

The server holds float64 parameters; the functions may compute in any precision (a float32
gradient is accepted as is). A GradientModel becomes a :class:`mpikanel.kernels.Model` whose step,
loss and predict are Python callables with the kernels' signatures, so binding, training under
every sync model, checkpoints and evaluation go through the same code as the numba kernels.
"""
from __future__ import annotations

from typing import Callable, Sequence

import hashlib

import numpy as np

from ..kernels.custom import sgd_update

#: rows per call when a loss or prediction covers a whole block (bounds the framework's memory)
EVAL_ROWS = 1024


class GradientModel:
    """A model from Python functions: init, grad(w, X, y) -> (g, loss), loss(w, X, y), predict(w, X)."""

    def __init__(self, init: np.ndarray | Callable[[int, int, np.random.Generator], np.ndarray],
                 grad: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, float]],
                 loss: Callable[[np.ndarray, np.ndarray, np.ndarray], float],
                 predict: Callable[[np.ndarray, np.ndarray], np.ndarray], *,
                 eval_rows: int = EVAL_ROWS, description: str = "") -> None:
        for what, f in (("grad", grad), ("loss", loss), ("predict", predict)):
            if not callable(f):
                raise TypeError(f"GradientModel: {what} must be callable")
        if not callable(init):
            init = np.array(init, dtype=np.float64).ravel()
            if init.size == 0:
                raise ValueError("GradientModel: init has no parameters")
        self.init, self.grad, self.loss, self.predict = init, grad, loss, predict
        self.eval_rows = int(eval_rows)
        self.description = description or "Python gradient model"

    def initial(self, n_features: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
        """The initial parameters as a fresh float64 vector (a callable init draws from rng)."""
        w = self.init(n_features, n_classes, rng) if callable(self.init) else self.init
        return np.array(w, dtype=np.float64).ravel()

    def step_gradient(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean gradient alone, for the SGD step (adapters override it to skip the loss)."""
        return self.grad(w, X, y)[0]

    def evaluate(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean loss and class indices of the rows (adapters override it with one forward pass)."""
        return float(self.loss(w, X, y)), np.asarray(self.predict(w, X))

    def set_threads(self, n: int) -> None:
        """Limit the framework's compute threads to n (plain numpy models: nothing to do)."""

    def as_model(self, name: str, n_features: int, n_classes: int,
                 input_shape: Sequence[int] | None = None) -> "Model":  # noqa: F821
        """The library Model of this GradientModel for data of n_features columns and n_classes classes."""
        from ..kernels.base import Model

        size = self.initial(n_features, n_classes, np.random.default_rng(0)).size
        shape = (-1, *input_shape) if input_shape else None
        memo = _Memo()
        sized: Callable[[int, int], int] = lambda d, C: size    # noqa: E731  fixed by the factory
        return Model(name=name, min_classes=1, max_classes=None, n_params=sized, scratch_size=sized,
                     sgd_step=_Step(self, shape), loss_sum=_LossSum(self, shape, memo),
                     predict=_Predict(self, shape, memo),
                     n_weights=sized, init=lambda n, d, C, rng: self.initial(d, C, rng),
                     compiled=False, source=self, description=self.description)


def _rows(X: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
    """Rows as the model sees them: reshaped to (rows, *input_shape) when one is given (a view)."""
    return X if shape is None else X.reshape(shape)


class _Step:
    """sgd_step(w, X, y, idx, lr, l2, C, scratch): w -= lr * (g + l2 * w) with g the model's mean gradient."""

    def __init__(self, gm: GradientModel, shape: tuple[int, ...] | None) -> None:
        self.gm, self.shape = gm, shape

    def __call__(self, w, X, y, idx, lr, l2, n_classes, scratch) -> None:
        if idx.shape[0] == 0:
            return
        g = np.asarray(self.gm.step_gradient(w, _rows(X[idx], self.shape), y[idx])).reshape(-1)
        if g.shape != w.shape:
            raise ValueError(f"the gradient has {g.size} entries, the parameters {w.size}")
        if g.dtype != np.float32:
            g = g.astype(np.float64, copy=False)
        sgd_update(w, g, lr, l2, w.shape[0])   # one pass: 25-33 us for 105k parameters, numpy took 4 (164-179 us)


class _Memo:
    """The classes the last loss_sum found, for the correct() that follows it on the same rows and w:
    evaluation asks for both, and a network's forward pass over a test set is the expensive part."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.classes: np.ndarray | None = None

    @staticmethod
    def key_of(w: np.ndarray, X: np.ndarray) -> tuple:
        return (X.__array_interface__["data"][0], X.shape, hashlib.blake2b(np.ascontiguousarray(w).data).digest())


class _LossSum:
    """loss_sum(w, X, y, C): the sum of per-row losses, from the model's mean loss over blocks of rows."""

    def __init__(self, gm: GradientModel, shape: tuple[int, ...] | None, memo: _Memo | None = None) -> None:
        self.gm, self.shape, self.memo = gm, shape, memo

    def __call__(self, w, X, y, n_classes) -> float:
        total, step, parts = 0.0, self.gm.eval_rows, []
        for a in range(0, X.shape[0], step):
            rows = X[a:a + step]
            loss, classes = self.gm.evaluate(w, _rows(rows, self.shape), y[a:a + step])
            total += float(loss) * rows.shape[0]
            parts.append(np.asarray(classes).reshape(-1))
        if self.memo is not None and parts:
            self.memo.key, self.memo.classes = _Memo.key_of(w, X), np.concatenate(parts).astype(np.int32)
        return total


class _Predict:
    """predict(w, X, C): class indices (int32), over blocks of rows."""

    def __init__(self, gm: GradientModel, shape: tuple[int, ...] | None, memo: _Memo | None = None) -> None:
        self.gm, self.shape, self.memo = gm, shape, memo

    def __call__(self, w, X, n_classes) -> np.ndarray:
        if self.memo is not None and self.memo.key is not None and self.memo.key == _Memo.key_of(w, X):
            return self.memo.classes.copy()
        step = self.gm.eval_rows
        parts = [np.asarray(self.gm.predict(w, _rows(X[a:a + step], self.shape))).reshape(-1)
                 for a in range(0, X.shape[0], step)]
        return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)
