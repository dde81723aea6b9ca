"""Generic linear-model kernels (dense and CSR), specialised per loss by a small integer `kind`.

Layout (every linear model, ``mpikanel/layout.py``): W^T as (d, U) row-major at w[:d*U], then one
bias per unit at w[d*U:], with U = 1 unit for binary logistic and U = C units for the multiclass losses.

kinds:  SOFTMAX  cross-entropy of softmax(z)                      (U = C)
        HINGE    one-vs-rest hinge, sum_c max(0, 1 - t_c z_c), t_c = +1 if c == y else -1   (U = C)
        SQUARED  one-vs-rest least squares, 0.5 sum_c (z_c - [c == y])^2                     (U = C)
        LOGISTIC binary log(1 + exp(-s z)), s = 2y - 1                                       (U = 1)

CSR steps touch only the features present in the minibatch, except the eager L2 decay, which
(for l2 > 0) scales every weight: O(U*d) per step.  ``csr_step_lazy`` (what workers run on CSR
rows with l2 > 0, see lazy.py) decays only the features it updates, catching each up on the
decay it missed, so the step and the worker's delta stay as sparse as the rows.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._blocks import HAVE_BLAS, blas_product, block_rows, exp_fast, exp_inplace, gather_rows, loop_product, scratch_rows
from ._intrinsics import PREFETCH_ROWS, prefetch_row, prefetch_span
from .lazy import catch_up

SOFTMAX, HINGE, SQUARED, LOGISTIC = 0, 1, 2, 3


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _units(kind, C):
    """Number of output units of a linear model."""
    return 1 if kind == LOGISTIC else C


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _softplus(t):
    """Overflow-free log(1 + exp(t))."""
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _check_label(kind, yi, C):
    """Raise ValueError for a label outside the model's range."""
    if kind == LOGISTIC:
        if yi != 0 and yi != 1:
            raise ValueError("logistic: labels must be 0 or 1")
    elif yi < 0 or yi >= C:
        raise ValueError("linear model: label out of range 0..n_classes-1")


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _residual(kind, z, U, yi):
    """Overwrite z[:U] (the logits) with dloss/dz and return the sample's loss."""
    if kind == LOGISTIC:
        t = z[0]
        if t >= 0.0:
            e = math.exp(-t)
            s = 1.0 / (1.0 + e)
        else:
            e = math.exp(t)
            s = e / (1.0 + e)
        loss = _softplus(-t if yi == 1 else t)
        z[0] = s - yi
        return loss
    if kind == SOFTMAX:
        zmax = z[0]
        for c in range(1, U):
            if z[c] > zmax:
                zmax = z[c]
        zy = z[yi]
        s = 0.0
        for c in range(U):
            e = math.exp(z[c] - zmax)
            z[c] = e
            s += e
        inv_s = 1.0 / s
        for c in range(U):
            z[c] *= inv_s
        z[yi] -= 1.0
        return zmax + math.log(s) - zy
    loss = 0.0
    if kind == HINGE:
        for c in range(U):
            t = 1.0 if c == yi else -1.0
            m = t * z[c]
            if m < 1.0:
                loss += 1.0 - m
                z[c] = -t
            else:
                z[c] = 0.0
        return loss
    for c in range(U):  # SQUARED
        r = z[c] - (1.0 if c == yi else 0.0)
        loss += 0.5 * r * r
        z[c] = r
    return loss


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _dense_logits(w, X, i, U, d, z):
    """z[u] = W[:, u].x_i + b[u]."""
    ud = U * d
    if U == 1:
        s = w[d]
        for j in range(d):
            s += w[j] * X[i, j]
        z[0] = s
        return
    for u in range(U):
        z[u] = w[ud + u]
    for j in range(d):
        xj = X[i, j]
        off = j * U
        for u in range(U):
            z[u] += xj * w[off + u]


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _csr_logits(w, indptr, indices, data, i, U, d, z):
    """z[u] = W[:, u].x_i + b[u] over the stored entries of row i."""
    ud = U * d
    lo, hi = indptr[i], indptr[i + 1]
    u0 = 0
    # four units at a time in registers (z may alias w as far as LLVM knows: a z[u] += would store
    # at every entry); fastmath may reorder each unit's sum, deterministically for a given build
    while u0 + 4 <= U:
        a0, a1, a2, a3 = w[ud + u0], w[ud + u0 + 1], w[ud + u0 + 2], w[ud + u0 + 3]
        for p in range(lo, hi):
            v = data[p]
            off = indices[p] * U + u0
            a0 += v * w[off]
            a1 += v * w[off + 1]
            a2 += v * w[off + 2]
            a3 += v * w[off + 3]
        z[u0], z[u0 + 1], z[u0 + 2], z[u0 + 3] = a0, a1, a2, a3
        u0 += 4
    for u in range(u0, U):
        a = w[ud + u]
        for p in range(lo, hi):
            a += data[p] * w[indices[p] * U + u]
        z[u] = a


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _dense_step(w, X, y, idx, lr, l2, C, scratch, kind, product):
    """One minibatch SGD step in place on dense rows: w -= lr * (mean loss gradient + l2*weights).

    Multiclass: the minibatch as small dense blocks (see _blocks): widen its rows to float64 Xb,
    Z = Xb @ W (+ b, added with the residuals, in place), G = Xb^T R (summed over the blocks of
    batches larger than the scratch's row block), then W = (1 - lr*l2) W - lr/nb G.  `product` is
    blas_product or loop_product (a compile-time choice: the two callers below).
    """
    d = X.shape[1]
    U = _units(kind, C)
    ud = U * d
    nb = idx.shape[0]
    if w.shape[0] != ud + U or scratch.shape[0] < multi_scratch_min(d, U):
        raise ValueError("linear sgd_step: w or scratch has the wrong length")
    if nb == 0:
        return
    if U == 1:
        _dense_step_unit(w, X, y, idx, lr, l2, C, scratch, kind)
        return
    rb = block_rows(scratch.shape[0] - (ud + 2 * U), d + U)
    gb = scratch[ud: ud + U]
    blk = scratch[ud + 2 * U:]
    W = w[:ud].reshape(d, U)
    b = w[ud:]
    G = scratch[:ud].reshape(d, U)
    for u in range(U):
        gb[u] = 0.0
    for k0 in range(0, nb, rb):
        rows = min(rb, nb - k0)
        Xb = blk[: rows * d].reshape(rows, d)
        Z = blk[rows * d: rows * (d + U)].reshape(rows, U)
        gather_rows(X, idx[k0: k0 + rows], Xb)
        product(Z, Xb, False, W, False)
        _residual_block(kind, Z, b, y, idx, k0, C, gb)
        product(G, Xb, True, Z, k0 > 0)
    alpha = -lr / nb
    beta = 1.0 - lr * l2
    for j in range(ud):
        w[j] = beta * w[j] + alpha * scratch[j]
    for u in range(U):
        w[ud + u] += alpha * gb[u]


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def dense_step_blas(w, X, y, idx, lr, l2, C, scratch, kind):
    """dense_step with its two products on BLAS gemm (needs SciPy)."""
    _dense_step(w, X, y, idx, lr, l2, C, scratch, kind, blas_product)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def dense_step_loop(w, X, y, idx, lr, l2, C, scratch, kind):
    """dense_step with its two products on the register-blocked loops of _blocks (no SciPy)."""
    _dense_step(w, X, y, idx, lr, l2, C, scratch, kind, loop_product)


#: One minibatch SGD step in place on dense rows (see _dense_step): on BLAS when SciPy is installed.
dense_step = dense_step_blas if HAVE_BLAS else dense_step_loop


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _residual_block(kind, Z, b, y, idx, k0, C, gb):
    """Add the biases b to the products Z (rows x U) of minibatch rows idx[k0:], overwrite them with
    dloss/dz, and add those into gb."""
    rows, U = Z.shape
    if kind == SOFTMAX:
        # shifted logits row by row, then one exp over the whole block (vectorised), then normalised
        for k in range(rows):
            _check_label(kind, y[idx[k0 + k]], C)
            zmax = Z[k, 0] + b[0]
            for u in range(U):
                Z[k, u] += b[u]
                zmax = max(zmax, Z[k, u])
            for u in range(U):
                Z[k, u] -= zmax
        exp_inplace(Z.reshape(Z.size))
    for k in range(rows):
        yi = y[idx[k0 + k]]
        if kind == SOFTMAX:
            s = 0.0
            for u in range(U):
                s += Z[k, u]
            inv_s = 1.0 / s
            for u in range(U):
                Z[k, u] *= inv_s
            Z[k, yi] -= 1.0
        else:
            _check_label(kind, yi, C)
            for u in range(U):
                Z[k, u] += b[u]
            if kind == HINGE:
                for u in range(U):
                    t = 1.0 if u == yi else -1.0
                    Z[k, u] = -t if t * Z[k, u] < 1.0 else 0.0
            else:
                for u in range(U):
                    Z[k, u] -= 1.0 if u == yi else 0.0
        for u in range(U):
            gb[u] += Z[k, u]


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _dense_step_unit(w, X, y, idx, lr, l2, C, scratch, kind):
    """One-unit (binary logistic) dense step, row by row."""
    d = X.shape[1]
    nb = idx.shape[0]
    g = scratch[: d + 1]
    for j in range(d + 1):
        g[j] = 0.0
    z = scratch[d + 1: d + 2]
    for k in range(min(PREFETCH_ROWS, nb)):
        prefetch_row(X, idx[k])
    for k in range(nb):
        if k + PREFETCH_ROWS < nb:
            prefetch_row(X, idx[k + PREFETCH_ROWS])
        i = idx[k]
        yi = y[i]
        _check_label(kind, yi, C)
        _dense_logits(w, X, i, 1, d, z)
        _residual(kind, z, 1, yi)
        g[d] += z[0]
        r = z[0]
        if r != 0.0:
            for j in range(d):
                g[j] += r * X[i, j]
    inv = 1.0 / nb
    for j in range(d):
        w[j] -= lr * (g[j] * inv + l2 * w[j])
    w[d] -= lr * (g[d] * inv)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def dense_loss(w, X, y, C, kind):
    """Sum over all rows of the loss (no L2 term)."""
    n, d = X.shape
    U = _units(kind, C)
    if w.shape[0] != U * (d + 1):
        raise ValueError("linear loss_sum: w has the wrong length")
    z = np.empty(U, dtype=np.float64)
    total = 0.0
    for i in range(n):
        yi = y[i]
        _check_label(kind, yi, C)
        _dense_logits(w, X, i, U, d, z)
        total += _residual(kind, z, U, yi)
    return total


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _argmax(z, U):
    """Class of the largest score (first on ties); 1 unit: z > 0."""
    if U == 1:
        return 1 if z[0] > 0.0 else 0
    best = 0
    for u in range(1, U):
        if z[u] > z[best]:
            best = u
    return best


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def dense_predict(w, X, C, kind):
    """Predicted class per row: argmax of the scores (logistic: score > 0)."""
    n, d = X.shape
    U = _units(kind, C)
    if w.shape[0] != U * (d + 1):
        raise ValueError("linear predict: w has the wrong length")
    z = np.empty(U, dtype=np.float64)
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        _dense_logits(w, X, i, U, d, z)
        out[i] = _argmax(z, U)
    return out


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _prefetch_csr_row(indptr, indices, data, y, i):
    """Prefetch the stored entries and the label of CSR row i (random minibatch rows miss the cache)."""
    lo, hi = indptr[i], indptr[i + 1]
    prefetch_span(indices, lo, hi)
    prefetch_span(data, lo, hi)
    prefetch_span(y, i, i + 1)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def csr_step(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind):
    """One minibatch SGD step in place on CSR rows; same update as dense_step.

    Two passes: every row's residuals at the current w first (kept in scratch), then the scaled
    rows are subtracted from w directly -- two random accesses per stored entry and unit, no
    gradient buffer to clear.
    """
    _csr_step(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, w[:0], w[:0], False)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def csr_step_lazy(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod):
    """csr_step with lazy L2 (mpikanel.kernels.lazy): only the features of rows with a nonzero
    residual decay now, each caught up first on the decay it missed since its stamp."""
    _csr_step(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod, True)


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _csr_step(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod, lazy):
    """The CSR step, eager or lazy (stamps and prod as in LazyDecay; unused when not lazy)."""
    if kind == LOGISTIC:   # U a constant: the per-entry unit loops vanish
        _csr_rows(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod, lazy, 1)
    else:
        _csr_rows(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod, lazy, C)


#: Rows ahead whose weights (and lazy stamps) are prefetched: their entries arrived PREFETCH_ROWS - this ago.
PREFETCH_WEIGHT_ROWS = 4


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def _prefetch_row_weights(w, indptr, indices, i, U, stamps, lazy):
    """Prefetch the weights (and stamps) of CSR row i's features: random gathers that miss the cache."""
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        prefetch_span(w, j * U, j * U + U)
        if lazy:
            prefetch_span(stamps, j, j + 1)


@njit(cache=True, fastmath=True, nogil=True, inline="always")
def _csr_rows(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch, kind, stamps, prod, lazy, U):
    """_csr_step's body for U units."""
    ud = U * d
    nb = idx.shape[0]
    if w.shape[0] != ud + U or scratch.shape[0] < U:
        raise ValueError("linear sgd_step_csr: w or scratch has the wrong length")
    if nb == 0:
        return
    if scratch.shape[0] >= nb * U + 2 * U:
        r = scratch[: nb * U]
        gb = scratch[nb * U : nb * U + U]
        z = scratch[nb * U + U : nb * U + 2 * U]
    else:  # batch larger than the scratch sizing assumed
        r = np.empty(nb * U)
        gb = np.empty(U)
        z = np.empty(U)
    for u in range(U):
        gb[u] = 0.0
    for k in range(min(2 * PREFETCH_ROWS, nb)):
        prefetch_span(indptr, idx[k], idx[k] + 2)
    for k in range(min(PREFETCH_ROWS, nb)):
        _prefetch_csr_row(indptr, indices, data, y, idx[k])
    for k in range(min(PREFETCH_WEIGHT_ROWS, nb)):
        _prefetch_row_weights(w, indptr, indices, idx[k], U, stamps, lazy)
    for k in range(nb):
        if k + 2 * PREFETCH_ROWS < nb:
            i2 = idx[k + 2 * PREFETCH_ROWS]
            prefetch_span(indptr, i2, i2 + 2)
        if k + PREFETCH_ROWS < nb:
            _prefetch_csr_row(indptr, indices, data, y, idx[k + PREFETCH_ROWS])
        if k + PREFETCH_WEIGHT_ROWS < nb:
            _prefetch_row_weights(w, indptr, indices, idx[k + PREFETCH_WEIGHT_ROWS], U, stamps, lazy)
        i = idx[k]
        yi = y[i]
        _check_label(kind, yi, C)
        if lazy:
            for p in range(indptr[i], indptr[i + 1]):
                catch_up(w, stamps, indices[p], prod[0], U)
        _csr_logits(w, indptr, indices, data, i, U, d, z)
        _residual(kind, z, U, yi)
        for u in range(U):
            r[k * U + u] = z[u]
            gb[u] += z[u]
    inv = 1.0 / nb
    if lazy:
        prod[0] *= 1.0 - lr * l2
    elif l2 != 0.0:
        decay = lr * l2
        for j in range(ud):
            w[j] -= decay * w[j]
    P = prod[0] if lazy else 1.0
    step = lr * inv
    for k in range(nb):
        i = idx[k]
        base = k * U
        nonzero = False
        for u in range(U):
            r[base + u] *= step
            if r[base + u] != 0.0:
                nonzero = True
        if not nonzero:
            continue
        lo, hi = indptr[i], indptr[i + 1]
        if lazy:
            for p in range(lo, hi):
                catch_up(w, stamps, indices[p], P, U)
        u0 = 0
        while u0 + 4 <= U:   # four units' residuals in registers, as in _csr_logits
            r0, r1, r2, r3 = r[base + u0], r[base + u0 + 1], r[base + u0 + 2], r[base + u0 + 3]
            for p in range(lo, hi):
                v = data[p]
                off = indices[p] * U + u0
                w[off] -= r0 * v
                w[off + 1] -= r1 * v
                w[off + 2] -= r2 * v
                w[off + 3] -= r3 * v
            u0 += 4
        for u in range(u0, U):
            ru = r[base + u]
            for p in range(lo, hi):
                w[indices[p] * U + u] -= ru * data[p]
    for u in range(U):
        w[ud + u] -= lr * (gb[u] * inv)


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def csr_loss(w, indptr, indices, data, d, y, C, kind):
    """Sum over all CSR rows of the loss (no L2 term)."""
    n = indptr.shape[0] - 1
    U = _units(kind, C)
    if w.shape[0] != U * (d + 1):
        raise ValueError("linear loss_sum_csr: w has the wrong length")
    z = np.empty(U, dtype=np.float64)
    total = 0.0
    for i in range(n):
        yi = y[i]
        _check_label(kind, yi, C)
        _csr_logits(w, indptr, indices, data, i, U, d, z)
        total += _residual(kind, z, U, yi)
    return total


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def csr_predict(w, indptr, indices, data, d, C, kind):
    """Predicted class per CSR row."""
    n = indptr.shape[0] - 1
    U = _units(kind, C)
    if w.shape[0] != U * (d + 1):
        raise ValueError("linear predict_csr: w has the wrong length")
    z = np.empty(U, dtype=np.float64)
    out = np.empty(n, dtype=np.int32)
    for i in range(n):
        _csr_logits(w, indptr, indices, data, i, U, d, z)
        out[i] = _argmax(z, U)
    return out


def multi_n_params(n_features: int, n_classes: int) -> int:
    """C units: C*d weights + C biases."""
    return n_classes * (n_features + 1)


@njit(cache=True, nogil=True, error_model="numpy")
def multi_scratch_min(d, U):
    """Smallest scratch a dense step accepts: gradient, bias gradient, logits, a one-row block."""
    return U * (d + 1) + 2 * U + (d + U)


def multi_scratch_size(n_features: int, n_classes: int) -> int:
    """Gradient + logits, a block of up to BLOCK_ROWS widened rows and their logits (dense step), and
    room for the CSR step's per-row residuals (batches of 2d/C rows; larger allocate)."""
    d, C = n_features, n_classes
    return C * (d + 1) + 2 * C + max(scratch_rows(d + C) * (d + C), 2 * d)


def linear_model(name: str, kind: int, description: str):
    """The Model record of a multi-output linear model whose loss is `kind`.

    The numba kernels above take `kind` as a runtime argument, so one compiled kernel serves
    softmax, svm and lsq; these thin Python wrappers only bind it.
    """
    from .base import Model

    def sgd_step(w, X, y, idx, lr, l2, n_classes, scratch):
        dense_step(w, X, y, idx, lr, l2, n_classes, scratch, kind)

    def loss_sum(w, X, y, n_classes):
        return dense_loss(w, X, y, n_classes, kind)

    def predict(w, X, n_classes):
        return dense_predict(w, X, n_classes, kind)

    def sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch):
        csr_step(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, kind)

    def sgd_step_csr_lazy(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, stamps, prod):
        csr_step_lazy(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, kind, stamps, prod)

    def loss_sum_csr(w, indptr, indices, data, d, y, n_classes):
        return csr_loss(w, indptr, indices, data, d, y, n_classes, kind)

    def predict_csr(w, indptr, indices, data, d, n_classes):
        return csr_predict(w, indptr, indices, data, d, n_classes, kind)

    return Model(name=name, min_classes=2, max_classes=None, n_params=multi_n_params,
                 scratch_size=multi_scratch_size, sgd_step=sgd_step, loss_sum=loss_sum, predict=predict,
                 sgd_step_csr=sgd_step_csr, loss_sum_csr=loss_sum_csr, predict_csr=predict_csr,
                 sgd_step_csr_lazy=sgd_step_csr_lazy, description=description, csr_keys=True)


@njit(cache=True, nogil=True)
def mark_csr_keys(indptr, indices, idx, units, d, mark, keys, n):
    """Append to keys[n:] the parameter keys the CSR rows idx touch in a linear layout (col * units
    + u, then the units biases at d * units) that ``mark`` does not hold yet; mark them. Returns
    the new count."""
    for k in range(idx.shape[0]):
        i = idx[k]
        for p in range(indptr[i], indptr[i + 1]):
            base = indices[p] * units
            if not mark[base]:
                for u in range(units):
                    mark[base + u] = True
                    keys[n] = base + u
                    n += 1
    for u in range(units):
        b = d * units + u
        if not mark[b]:
            mark[b] = True
            keys[n] = b
            n += 1
    return n
