"""The flat parameter vector of the built-in models, decoded in one place (numpy only: no numba, no MPI).

Every model puts its L2-regularised weights first, then its biases.

Linear models (logistic, softmax, svm, lsq): W^T as (d, U) row-major at w[:d*U] (feature j's U
weights are adjacent: w[j*U + u], so a sparse row touches one cache line per stored entry), then
one bias per unit at w[d*U:]; U = 1 for binary logistic, C for the multiclass losses.

MLP: W1 (d, H) row-major at w[0 : d*H] (input -> hidden, one row of H per feature), W2 (C, H)
row-major at w[d*H : d*H + C*H] (hidden -> output), then b1 (H) and b2 (C); H follows from
len(w) = H*(d + C + 1) + C.

The views returned share memory with w. The numba kernels index the same layout in their loops
(``mpikanel/kernels/_linear.py``, ``mlp.py``); model files (``mpikanel/model_io.py``), the curve's
BLAS scores (``mpikanel/evaluate.py``) and the permutation of trained columns read it from here.
"""
from __future__ import annotations

import numpy as np

#: the built-in linear models, each with units_of(model, C) output units
LINEAR_MODELS = ("logistic", "softmax", "svm", "lsq")


def units_of(model: str, n_classes: int) -> int:
    """Output units U of a built-in linear model: 1 for logistic, one per class for the others."""
    return 1 if model == "logistic" else n_classes


def weights_per_feature(w_len: int, n_features: int) -> int:
    """k of a vector whose head is a (d, k) feature-major block (a linear layout's U, an MLP's H when (H+1)*C <= d)."""
    return w_len // (n_features + 1)


def linear_units(w_len: int, n_features: int) -> int:
    """U of a linear layout of length w_len; ValueError if w_len is not one."""
    if n_features < 1 or w_len % (n_features + 1) != 0:
        raise ValueError(
            f"parameter vector of length {w_len} is not a linear layout for {n_features} features"
        )
    return weights_per_feature(w_len, n_features)


def linear_n_weights(w_len: int, n_features: int) -> int:
    """Number of regularised weights in a linear layout of k units each with n_features weights + 1 bias."""
    return linear_units(w_len, n_features) * n_features


def linear_views(w: np.ndarray, n_features: int, units: int) -> tuple[np.ndarray, np.ndarray]:
    """W (d, U) and b (U) of a linear layout; ValueError if w does not have U*(d + 1) entries."""
    d = n_features
    if w.shape[0] != units * (d + 1):
        raise ValueError(f"parameter vector of length {w.shape[0]} is not a linear layout of {units} units "
                         f"for {d} features")
    return w[:d * units].reshape(d, units), w[d * units:d * units + units]


def feature_rows(w: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """The head's (d, k) per-feature block (k = weights_per_feature) and the entries after it."""
    k = weights_per_feature(w.size, n_features)
    return w[:n_features * k].reshape(n_features, k), w[n_features * k:]


def mlp_hidden(w_len: int, n_features: int, n_classes: int) -> int:
    """H of an MLP layout of length w_len; -1 if w_len is not one (plain arithmetic: the kernels jit it)."""
    d, C = n_features, n_classes
    H = (w_len - C) // (d + C + 1)
    if H < 1 or H * (d + C + 1) + C != w_len:
        return -1
    return H


def mlp_views(w: np.ndarray, n_features: int,
              n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """W1 (d, H), W2 (C, H), b1 (H), b2 (C) as views into the flat vector w; ValueError if w is not an MLP layout."""
    d, C = n_features, n_classes
    H = mlp_hidden(w.shape[0], d, C)
    if H < 1:
        raise ValueError(f"parameter vector of length {w.shape[0]} is not an MLP layout for d={d}, C={C}")
    o1, o2, o3 = d * H, d * H + C * H, d * H + C * H + H
    return w[:o1].reshape(d, H), w[o1:o2].reshape(C, H), w[o2:o3], w[o3:o3 + C]
