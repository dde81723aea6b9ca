"""Multiclass softmax (multinomial logistic) regression on dense float32 rows.

Layout: W as (C, d) row-major at w[:C*d], then biases b at w[C*d:C*d+C].
Per-sample loss: cross-entropy logsumexp(z) - z[y], z = W x + b.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._intrinsics import PREFETCH_ROWS, prefetch_row
from .base import Model


def n_params(n_features: int, n_classes: int) -> int:
    """Length of the softmax parameter vector: C*d weights + C biases."""
    return n_classes * (n_features + 1)


def scratch_size(n_features: int, n_classes: int) -> int:
    """Length of the float64 scratch buffer: C*(d+1) gradient + C logits."""
    return n_classes * (n_features + 1) + n_classes


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _logits(w, X, i, C, d, z):
    """Write z[c] = W[c].x_i + b[c] and return max_c z[c]."""
    cd = C * d
    zmax = -math.inf
    for c in range(C):
        off = c * d
        s = w[cd + c]
        for j in range(d):
            s += w[off + j] * X[i, j]
        z[c] = s
        if c == 0 or s > zmax:
            zmax = s
    return zmax


@njit(cache=True, fastmath=True, nogil=True)
def sgd_step(w, X, y, idx, lr, l2, n_classes, scratch):
    """One minibatch SGD step in place: w -= lr * (mean cross-entropy gradient + l2*weights)."""
    d = X.shape[1]
    C = n_classes
    nb = idx.shape[0]
    cd = C * d
    if C < 2 or w.shape[0] != cd + C or scratch.shape[0] < cd + 2 * C:
        raise ValueError("softmax sgd_step: w or scratch has the wrong length")
    if nb == 0:
        return
    g = scratch[: cd + C]  # gW at [0:cd], gb at [cd:cd+C]
    p = scratch[cd + C : cd + 2 * C]
    for j in range(cd + C):
        g[j] = 0.0
    for k in range(min(PREFETCH_ROWS, nb)):
        prefetch_row(X, idx[k])
    for k in range(nb):
        if k + PREFETCH_ROWS < nb:
            prefetch_row(X, idx[k + PREFETCH_ROWS])
        i = idx[k]
        yi = y[i]
        if yi < 0 or yi >= C:
            raise ValueError("softmax: label out of range 0..n_classes-1")
        zmax = _logits(w, X, i, C, d, p)
        s = 0.0
        for c in range(C):
            e = math.exp(p[c] - zmax)
            p[c] = e
            s += e
        inv_s = 1.0 / s
        for c in range(C):
            p[c] *= inv_s
        p[yi] -= 1.0
        for c in range(C):
            r = p[c]
            off = c * d
            for j in range(d):
                g[off + j] += r * X[i, j]
            g[cd + c] += r
    inv = 1.0 / nb
    for j in range(cd):
        w[j] -= lr * (g[j] * inv + l2 * w[j])
    for c in range(C):
        w[cd + c] -= lr * (g[cd + c] * inv)


@njit(cache=True, fastmath=True, nogil=True)
def loss_sum(w, X, y, n_classes):
    """Sum over all rows of the softmax cross-entropy (no L2 term)."""
    n, d = X.shape
    C = n_classes
    if C < 2 or w.shape[0] != C * (d + 1):
        raise ValueError("softmax loss_sum: w has the wrong length")
    z = np.empty(C, dtype=np.float64)
    total = 0.0
    for i in range(n):
        yi = y[i]
        if yi < 0 or yi >= C:
            raise ValueError("softmax: label out of range 0..n_classes-1")
        zmax = _logits(w, X, i, C, d, z)
        s = 0.0
        for c in range(C):
            s += math.exp(z[c] - zmax)
        total += zmax + math.log(s) - z[yi]
    return total


@njit(cache=True, fastmath=True, nogil=True)
def predict(w, X, n_classes):
    """Predicted class per row: argmax of the logits (first index on ties)."""
    n, d = X.shape
    C = n_classes
    if C < 2 or w.shape[0] != C * (d + 1):
        raise ValueError("softmax predict: w has the wrong length")
    z = np.empty(C, dtype=np.float64)
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        zmax = _logits(w, X, i, C, d, z)
        best = 0
        for c in range(C):
            if z[c] == zmax:
                best = c
                break
        out[i] = best
    return out


MODEL = Model(
    name="softmax",
    min_classes=2,
    max_classes=None,
    n_params=n_params,
    scratch_size=scratch_size,
    sgd_step=sgd_step,
    loss_sum=loss_sum,
    predict=predict,
)
