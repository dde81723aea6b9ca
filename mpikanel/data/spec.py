"""Where the training (and test) data come from: the DataSpec a config names, and its checks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mpikanel.errors import InputError


@dataclass(frozen=True)
class DataSpec:
    """Where the training (and test) data come from."""

    source: str = "synthetic"
    data_dir: str | None = None
    test_source: str | None = None
    test_fraction: float = 0.1
    seed: int = 0
    synthetic_rows: int = 100_000
    synthetic_features: int = 100
    synthetic_classes: int = 10
    n_features: int | None = None
    sparse_nnz: int = 50
    sparse_alpha: float = 1.1
    sparse_values: str = "binary"
    permute_features: bool = False   # CSR column c becomes feature_permutation(d, seed)[c] (--permute-features)


def data_spec(config: Any) -> DataSpec:
    """The data source a config names."""
    return DataSpec(source=config.data, data_dir=config.data_dir, test_source=config.test_data,
                    test_fraction=config.test_fraction, seed=config.seed,
                    synthetic_rows=config.synthetic_rows, synthetic_features=config.synthetic_features,
                    synthetic_classes=config.n_classes_hint, n_features=config.n_features,
                    sparse_nnz=config.sparse_nnz, sparse_alpha=config.sparse_alpha, sparse_values=config.sparse_values,
                    permute_features=config.permute_features == "on")


def check_spec(spec: DataSpec) -> None:
    """Raise InputError for a spec no source can serve (test fraction, feature count, test source)."""
    if not (0.0 <= spec.test_fraction < 1.0):
        raise InputError(f"test fraction must be in [0, 1), got {spec.test_fraction}")
    if spec.n_features is not None and spec.n_features < 1:
        raise InputError(f"n_features must be positive, got {spec.n_features}")
    test = spec.test_source
    if test == "synthetic":
        raise InputError("test source 'synthetic' is not supported; use the test fraction instead")
    if test is not None and test != "fashion-mnist" and not os.path.exists(test):
        raise InputError(f"{test}: no such file")
