"""A tiny numpy logistic regression as a GradientModel (the tests' --model py: factory)."""
from __future__ import annotations

import numpy as np

from mpikanel.models import GradientModel


def _split(w: np.ndarray, d: int) -> tuple[np.ndarray, float]:
    return w[:d], float(w[d])


def make(n_features: int, n_classes: int, input_shape: tuple[int, ...] | None) -> GradientModel:
    """Binary logistic regression: w[:d] weights, w[d] bias; rows flattened if shaped."""
    d = n_features
    if n_classes != 2:
        raise ValueError(f"np_logistic is binary, the data has {n_classes} classes")

    def scores(w: np.ndarray, X: np.ndarray) -> np.ndarray:
        a, b = _split(w, d)
        return X.reshape(X.shape[0], d).astype(np.float64) @ a + b

    def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        z = scores(w, X)
        return float(np.mean(np.logaddexp(0.0, z) - y * z))

    def grad(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        Xf = X.reshape(X.shape[0], d).astype(np.float64)
        z = Xf @ w[:d] + w[d]
        r = (0.5 * (1.0 + np.tanh(0.5 * z)) - y) / X.shape[0]
        g = np.empty_like(w)
        g[:d] = Xf.T @ r
        g[d] = r.sum()
        return g, float(np.mean(np.logaddexp(0.0, z) - y * z))

    def predict(w: np.ndarray, X: np.ndarray) -> np.ndarray:
        return (scores(w, X) > 0).astype(np.int32)

    return GradientModel(lambda n, C, rng: rng.normal(0.0, 0.01, n + 1), grad, loss, predict)


def broken(n_features: int, n_classes: int, input_shape: tuple[int, ...] | None) -> GradientModel:
    """A factory that raises."""
    raise RuntimeError("this factory always fails")


def not_a_model(n_features: int, n_classes: int, input_shape: tuple[int, ...] | None) -> object:
    """A factory that returns the wrong thing."""
    return 42
