"""--permute-features: the seeded column permutation, and a trained model's parameters taken back through it."""

from __future__ import annotations

import numpy as np

from mpikanel.layout import feature_rows


def feature_permutation(n_features: int, seed: int) -> np.ndarray:
    """The seeded permutation --permute-features applies to CSR column ids: column c becomes perm[c],
    so features popular at low ids (power-law data, ids in order of appearance) spread over the
    servers' contiguous key ranges."""
    return np.random.default_rng([seed, 0x5EED]).permutation(n_features).astype(np.int32)


def unpermute_linear(params: np.ndarray, n_features: int, seed: int) -> np.ndarray:
    """Parameters of a linear layout trained on permuted columns, in the data's own column order."""
    weights, rest = feature_rows(params, n_features)
    return np.concatenate([weights[feature_permutation(n_features, seed)].ravel(), rest])
