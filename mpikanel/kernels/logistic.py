"""Binary logistic regression on dense float32 rows (CSR rows via _linear); labels 0/1.

Layout: w[:d] weights, w[d] bias.  Per-sample loss log(1 + exp(-s*z)) with s = 2y-1, z = w.x + b.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._intrinsics import PREFETCH_ROWS, prefetch_row
from . import _linear
from .base import Model


def n_params(n_features: int, n_classes: int) -> int:
    """Length of the logistic parameter vector: d weights + 1 bias."""
    return n_features + 1


def scratch_size(n_features: int, n_classes: int) -> int:
    """Length of the float64 scratch buffer: the gradient, plus room for the CSR step's marks."""
    return 3 * n_features + 3


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _sigmoid(z):
    """Overflow-free logistic function."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _softplus(t):
    """Overflow-free log(1 + exp(t))."""
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def sgd_step(w, X, y, idx, lr, l2, n_classes, scratch):
    """One minibatch SGD step in place: w -= lr * (mean logistic-loss gradient + l2*weights)."""
    d = X.shape[1]
    nb = idx.shape[0]
    if w.shape[0] != d + 1 or scratch.shape[0] < d + 1:
        raise ValueError("logistic sgd_step: w or scratch has the wrong length")
    if nb == 0:
        return
    g = scratch
    for j in range(d + 1):
        g[j] = 0.0
    b = w[d]
    for k in range(min(PREFETCH_ROWS, nb)):
        prefetch_row(X, idx[k])
    for k in range(nb):
        if k + PREFETCH_ROWS < nb:
            prefetch_row(X, idx[k + PREFETCH_ROWS])
        i = idx[k]
        z = b
        for j in range(d):
            z += w[j] * X[i, j]
        yi = y[i]
        if yi != 0 and yi != 1:
            raise ValueError("logistic: labels must be 0 or 1")
        r = _sigmoid(z) - yi
        for j in range(d):
            g[j] += r * X[i, j]
        g[d] += r
    inv = 1.0 / nb
    for j in range(d):
        w[j] -= lr * (g[j] * inv + l2 * w[j])
    w[d] -= lr * (g[d] * inv)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def loss_sum(w, X, y, n_classes):
    """Sum over all rows of the logistic loss (no L2 term)."""
    n, d = X.shape
    if w.shape[0] != d + 1:
        raise ValueError("logistic loss_sum: w has the wrong length")
    b = w[d]
    total = 0.0
    for i in range(n):
        z = b
        for j in range(d):
            z += w[j] * X[i, j]
        yi = y[i]
        if yi != 0 and yi != 1:
            raise ValueError("logistic: labels must be 0 or 1")
        total += _softplus(-z if yi == 1 else z)
    return total


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def predict(w, X, n_classes):
    """Predicted class per row: 1 where w.x + b > 0, else 0."""
    n, d = X.shape
    if w.shape[0] != d + 1:
        raise ValueError("logistic predict: w has the wrong length")
    out = np.empty(n, dtype=np.int32)
    b = w[d]
    for i in range(n):
        z = b
        for j in range(d):
            z += w[j] * X[i, j]
        out[i] = 1 if z > 0.0 else 0
    return out


def sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch):
    """One minibatch SGD step in place on CSR rows."""
    _linear.csr_step(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, _linear.LOGISTIC)


def sgd_step_csr_lazy(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, stamps, prod):
    """One minibatch SGD step in place on CSR rows with lazy L2 (mpikanel.kernels.lazy)."""
    _linear.csr_step_lazy(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, _linear.LOGISTIC,
                          stamps, prod)


def loss_sum_csr(w, indptr, indices, data, d, y, n_classes):
    """Sum over all CSR rows of the logistic loss (no L2 term)."""
    return _linear.csr_loss(w, indptr, indices, data, d, y, n_classes, _linear.LOGISTIC)


def predict_csr(w, indptr, indices, data, d, n_classes):
    """Predicted class per CSR row."""
    return _linear.csr_predict(w, indptr, indices, data, d, n_classes, _linear.LOGISTIC)


MODEL = Model(
    name="logistic",
    min_classes=2,
    max_classes=2,
    n_params=n_params,
    scratch_size=scratch_size,
    sgd_step=sgd_step,
    loss_sum=loss_sum,
    predict=predict,
    sgd_step_csr=sgd_step_csr,
    loss_sum_csr=loss_sum_csr,
    predict_csr=predict_csr,
    sgd_step_csr_lazy=sgd_step_csr_lazy,
    description="binary logistic regression",
    csr_keys=True,
)
