"""One-hidden-layer perceptron (ReLU or tanh hidden units, softmax output) on dense or CSR rows.

Layout of the flat parameter vector: W1 (d, H), W2 (C, H), b1 (H), b2 (C) (``mpikanel/layout.py``;
``views`` returns numpy views into it, no copies). H is recovered from len(w) = H*(d + C + 1) + C,
so kernels need no extra argument but the activation (0 = ReLU, 1 = tanh).  Per-sample loss:
softmax cross-entropy of the output.
Initial weights are Glorot-uniform (zero would keep all hidden units identical), biases zero.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from ..errors import InputError
from ..layout import mlp_hidden
from ..layout import mlp_views as views
from ._blocks import block_rows, exp_fast, gather_rows, gemm, scratch_rows
from ._linear import SOFTMAX, _residual
from .base import Model

RELU, TANH = 0, 1
ACTIVATIONS = {"relu": RELU, "tanh": TANH}
DEFAULT_HIDDEN = 64


def n_params(n_features: int, n_classes: int, hidden: int = DEFAULT_HIDDEN) -> int:
    """H*(d + C + 1) + C parameters."""
    return hidden * (n_features + n_classes + 1) + n_classes


def n_weights(n_features: int, n_classes: int, hidden: int = DEFAULT_HIDDEN) -> int:
    """Regularised weights: W1 and W2."""
    return hidden * (n_features + n_classes)


def scratch_size(n_features: int, n_classes: int, hidden: int = DEFAULT_HIDDEN) -> int:
    """Gradient, hidden activations and deltas, logits, W2 transposed, and a block of rows for the dense step."""
    d, C, H = n_features, n_classes, hidden
    return n_params(d, C, H) + 2 * H + C + H * C + scratch_rows(d + 2 * H + C) * (d + 2 * H + C)


def init(n_params_: int, n_features: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Glorot-uniform weights, zero biases."""
    w = np.zeros(n_params_, dtype=np.float64)
    W1, W2, _, _ = views(w, n_features, n_classes)
    H = W1.shape[1]
    W1[:] = rng.uniform(-1.0, 1.0, W1.shape) * math.sqrt(6.0 / (n_features + H))
    W2[:] = rng.uniform(-1.0, 1.0, W2.shape) * math.sqrt(6.0 / (H + n_classes))
    return w


#: H from the parameter-vector length; -1 if it is not an MLP layout
_hidden_of = njit(cache=True, fastmath=True, nogil=True, inline="always")(mlp_hidden)


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _activate(a, H, act):
    """Apply the activation in place."""
    if act == RELU:
        for h in range(H):
            if a[h] < 0.0:
                a[h] = 0.0
    else:
        for h in range(H):
            a[h] = math.tanh(a[h])


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _output(w, a, H, C, o1, ob2, z):
    """z = W2 a + b2."""
    for c in range(C):
        s = w[ob2 + c]
        off = o1 + c * H
        for h in range(H):
            s += w[off + h] * a[h]
        z[c] = s


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _backprop_top(w, g, a, dh, z, H, C, o1, ob1, ob2, act):
    """Accumulate W2/b2/b1 gradients and leave dloss/d(pre-activation) in dh."""
    for h in range(H):
        dh[h] = 0.0
    for c in range(C):
        r = z[c]
        off = o1 + c * H
        g[ob2 + c] += r
        for h in range(H):
            g[off + h] += r * a[h]
            dh[h] += r * w[off + h]
    for h in range(H):
        if act == RELU:
            if a[h] <= 0.0:
                dh[h] = 0.0
        else:
            dh[h] *= 1.0 - a[h] * a[h]
        g[ob1 + h] += dh[h]


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def dense_step(w, X, y, idx, lr, l2, C, scratch, act):
    """One minibatch SGD step in place on dense rows: w -= lr * (mean gradient + l2*weights).

    The minibatch as small dense blocks (see _blocks), forward and backward fused per block:
    A = Xb @ W1 + b1, Hh = act(A), Z = Hh @ W2^T + b2, R = softmax(Z) - onehot, dH = R @ W2,
    dA = dH * act'(A); then W2 = (1 - lr*l2) W2 - lr/nb R^T Hh and W1 likewise with Xb^T dA,
    written straight into the flat vector (larger batches than the row block: gradient
    accumulated per block, then applied).
    """
    d = X.shape[1]
    n = w.shape[0]
    H = _hidden_of(n, d, C)
    nb = idx.shape[0]
    base = n + 2 * H + C + H * C
    row_len = d + 2 * H + C
    if C < 2 or H < 0 or scratch.shape[0] < base + row_len:
        raise ValueError("mlp sgd_step: w or scratch has the wrong length")
    if nb == 0:
        return
    o1 = d * H
    ob1 = o1 + C * H
    ob2 = ob1 + H
    W1 = w[:o1].reshape(d, H)
    W2 = w[o1:ob1].reshape(C, H)
    g = scratch[:n]
    G1 = g[:o1].reshape(d, H)
    G2 = g[o1:ob1].reshape(C, H)
    W2T = scratch[n + 2 * H + C: base].reshape(H, C)
    for c in range(C):
        for h in range(H):
            W2T[h, c] = W2[c, h]
    for k in range(ob1, n):
        g[k] = 0.0
    rb = block_rows(scratch.shape[0] - base, row_len)
    blk = scratch[base:]
    single = nb <= rb
    inv = 1.0 / nb
    for k0 in range(0, nb, rb):
        rows = min(rb, nb - k0)
        Xb = blk[: rows * d].reshape(rows, d)
        A = blk[rows * d: rows * (d + H)].reshape(rows, H)
        dA = blk[rows * (d + H): rows * (d + 2 * H)].reshape(rows, H)
        Z = blk[rows * (d + 2 * H): rows * row_len].reshape(rows, C)
        gather_rows(X, idx[k0: k0 + rows], Xb)
        for k in range(rows):
            for h in range(H):
                A[k, h] = w[ob1 + h]
            for c in range(C):
                Z[k, c] = w[ob2 + c]
        gemm(A, Xb, False, W1, 1.0, 1.0)
        _activate_block(A, act)
        gemm(Z, A, False, W2T, 1.0, 1.0)
        for k in range(rows):
            yi = y[idx[k0 + k]]
            if yi < 0 or yi >= C:
                raise ValueError("mlp: label out of range 0..n_classes-1")
            zmax = Z[k, 0]
            for c in range(1, C):
                zmax = max(zmax, Z[k, c])
            s = 0.0
            for c in range(C):
                e = exp_fast(Z[k, c] - zmax)
                Z[k, c] = e
                s += e
            inv_s = 1.0 / s
            for c in range(C):
                Z[k, c] *= inv_s
            Z[k, yi] -= 1.0
            for c in range(C):
                g[ob2 + c] += Z[k, c]
        gemm(dA, Z, False, W2, 1.0, 0.0)   # dH = R @ W2 at the current W2
        for k in range(rows):
            for h in range(H):
                if act == RELU:
                    if A[k, h] <= 0.0:
                        dA[k, h] = 0.0
                else:
                    dA[k, h] *= 1.0 - A[k, h] * A[k, h]
                g[ob1 + h] += dA[k, h]
        if single:
            gemm(W2, Z, True, A, -lr * inv, 1.0 - lr * l2)
            gemm(W1, Xb, True, dA, -lr * inv, 1.0 - lr * l2)
        else:
            first = 0.0 if k0 == 0 else 1.0
            gemm(G2, Z, True, A, 1.0, first)
            gemm(G1, Xb, True, dA, 1.0, first)
    if not single:
        for k in range(ob1):
            w[k] -= lr * (g[k] * inv + l2 * w[k])
    for k in range(ob1, n):
        w[k] -= lr * (g[k] * inv)


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _activate_block(A, act):
    """Apply the activation in place to a 2-D block."""
    rows, H = A.shape
    for k in range(rows):
        if act == RELU:
            for h in range(H):
                A[k, h] = max(A[k, h], 0.0)
        else:
            for h in range(H):
                A[k, h] = math.tanh(A[k, h])


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def csr_step(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, act):
    """One minibatch SGD step in place on CSR rows; same update as dense_step.

    Two passes: forward/backward of every row at the current w (W2/b gradients accumulated, each
    row's hidden delta kept), then the scaled rows are subtracted from the W1 rows they touch --
    no W1-sized gradient buffer to clear.
    """
    n = w.shape[0]
    H = _hidden_of(n, d, C)
    nb = idx.shape[0]
    if C < 2 or H < 0 or scratch.shape[0] < n + 2 * H + C:
        raise ValueError("mlp sgd_step_csr: w or scratch has the wrong length")
    if nb == 0:
        return
    o1 = d * H
    ob1 = o1 + C * H
    ob2 = ob1 + H
    g = scratch[:n]          # only g[o1:] (W2, b1, b2) is used; g[:o1] holds the row deltas
    a = scratch[n:n + H]
    dh = scratch[n + H:n + 2 * H]
    z = scratch[n + 2 * H:n + 2 * H + C]
    deltas = scratch[:nb * H] if nb * H <= o1 else np.empty(nb * H)
    for k in range(o1, n):
        g[k] = 0.0
    for k in range(nb):
        i = idx[k]
        yi = y[i]
        if yi < 0 or yi >= C:
            raise ValueError("mlp: label out of range 0..n_classes-1")
        for h in range(H):
            a[h] = w[ob1 + h]
        for p in range(indptr[i], indptr[i + 1]):
            xj = data[p]
            off = indices[p] * H
            for h in range(H):
                a[h] += xj * w[off + h]
        _activate(a, H, act)
        _output(w, a, H, C, o1, ob2, z)
        _residual(SOFTMAX, z, C, yi)
        _backprop_top(w, g, a, dh, z, H, C, o1, ob1, ob2, act)
        for h in range(H):
            deltas[k * H + h] = dh[h]
    inv = 1.0 / nb
    if l2 != 0.0:
        decay = lr * l2
        for k in range(ob1):
            w[k] -= decay * w[k]
    step = lr * inv
    for k in range(nb):
        i = idx[k]
        base = k * H
        for p in range(indptr[i], indptr[i + 1]):
            c = step * data[p]
            off = indices[p] * H
            for h in range(H):
                w[off + h] -= c * deltas[base + h]
    for k in range(o1, n):
        w[k] -= lr * (g[k] * inv)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _forward_dense(w, X, C, act, y, want_loss):
    """Loss sum (want_loss) or predictions over all dense rows."""
    nrows, d = X.shape
    n = w.shape[0]
    H = _hidden_of(n, d, C)
    if C < 2 or H < 0:
        raise ValueError("mlp: w has the wrong length")
    o1 = d * H
    ob1 = o1 + C * H
    ob2 = ob1 + H
    a = np.empty(H)
    z = np.empty(C)
    out = np.empty(nrows, dtype=np.int32)
    total = 0.0
    for i in range(nrows):
        for h in range(H):
            a[h] = w[ob1 + h]
        for j in range(d):
            xj = X[i, j]
            if xj != 0.0:
                off = j * H
                for h in range(H):
                    a[h] += xj * w[off + h]
        _activate(a, H, act)
        _output(w, a, H, C, o1, ob2, z)
        if want_loss:
            yi = y[i]
            if yi < 0 or yi >= C:
                raise ValueError("mlp: label out of range 0..n_classes-1")
            total += _residual(SOFTMAX, z, C, yi)
        else:
            best = 0
            for c in range(1, C):
                if z[c] > z[best]:
                    best = c
            out[i] = best
    return total, out


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _forward_csr(w, indptr, indices, data, d, C, act, y, want_loss):
    """Loss sum (want_loss) or predictions over all CSR rows."""
    nrows = indptr.shape[0] - 1
    n = w.shape[0]
    H = _hidden_of(n, d, C)
    if C < 2 or H < 0:
        raise ValueError("mlp: w has the wrong length")
    o1 = d * H
    ob1 = o1 + C * H
    ob2 = ob1 + H
    a = np.empty(H)
    z = np.empty(C)
    out = np.empty(nrows, dtype=np.int32)
    total = 0.0
    for i in range(nrows):
        for h in range(H):
            a[h] = w[ob1 + h]
        for p in range(indptr[i], indptr[i + 1]):
            xj = data[p]
            off = indices[p] * H
            for h in range(H):
                a[h] += xj * w[off + h]
        _activate(a, H, act)
        _output(w, a, H, C, o1, ob2, z)
        if want_loss:
            yi = y[i]
            if yi < 0 or yi >= C:
                raise ValueError("mlp: label out of range 0..n_classes-1")
            total += _residual(SOFTMAX, z, C, yi)
        else:
            best = 0
            for c in range(1, C):
                if z[c] > z[best]:
                    best = c
            out[i] = best
    return total, out


_NO_LABELS = np.zeros(0, dtype=np.int32)


def sgd_step(w, X, y, idx, lr, l2, n_classes, scratch, act=RELU):
    """One minibatch SGD step in place on dense rows."""
    dense_step(w, X, y, idx, lr, l2, n_classes, scratch, act)


def loss_sum(w, X, y, n_classes, act=RELU):
    """Sum over dense rows of the cross-entropy (no L2 term)."""
    return _forward_dense(w, X, n_classes, act, y, True)[0]


def predict(w, X, n_classes, act=RELU):
    """Predicted class per dense row."""
    return _forward_dense(w, X, n_classes, act, _NO_LABELS, False)[1]


def sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, act=RELU):
    """One minibatch SGD step in place on CSR rows."""
    csr_step(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, act)


def loss_sum_csr(w, indptr, indices, data, d, y, n_classes, act=RELU):
    """Sum over CSR rows of the cross-entropy (no L2 term)."""
    return _forward_csr(w, indptr, indices, data, d, n_classes, act, y, True)[0]


def predict_csr(w, indptr, indices, data, d, n_classes, act=RELU):
    """Predicted class per CSR row."""
    return _forward_csr(w, indptr, indices, data, d, n_classes, act, _NO_LABELS, False)[1]


def make(hidden: int = DEFAULT_HIDDEN, activation: str = "relu") -> Model:
    """The MLP Model with `hidden` units and the given activation (relu|tanh)."""
    if not isinstance(hidden, int) or hidden < 1:
        raise InputError(f"--hidden must be a positive integer, got {hidden!r}")
    if activation not in ACTIVATIONS:
        raise InputError(f"unknown activation {activation!r}; choose from: {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]
    p = functools.partial
    return Model(
        name="mlp",
        min_classes=2,
        max_classes=None,
        n_params=p(n_params, hidden=hidden),
        scratch_size=p(scratch_size, hidden=hidden),
        sgd_step=p(sgd_step, act=act),
        loss_sum=p(loss_sum, act=act),
        predict=p(predict, act=act),
        n_weights=p(n_weights, hidden=hidden),
        sgd_step_csr=p(sgd_step_csr, act=act),
        loss_sum_csr=p(loss_sum_csr, act=act),
        predict_csr=p(predict_csr, act=act),
        init=init,
        configure=_configure,
        description=f"MLP, {hidden} {activation} hidden units, softmax output",
    )


def _configure(model: Model, hidden: int | None = None, activation: str | None = None, **_: object) -> Model:
    """Reconfigure with new hyper-parameters (None keeps the default)."""
    return make(DEFAULT_HIDDEN if hidden is None else hidden, activation or "relu")


MODEL = make()
