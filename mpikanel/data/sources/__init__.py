"""The data sources, one module per format, and which one a name opens.

Each source has: name, description, n_rows (total), n_features, fixed_classes, where(row),
all_labels(), read(start, stop) -> (X, raw y).
"""

from __future__ import annotations

import os

from mpikanel.errors import InputError

from ..spec import DataSpec
from .arrays import Hdf5, Npz
from .base import Source
from .idx import DEFAULT_FASHION_DIR, FashionMnist
from .libsvm import Libsvm
from .synthetic import Synthetic, SyntheticSparse


def open_train(spec: DataSpec, n_features: int | None = None) -> Source:
    """The source of the training data a spec names (n_features: the libsvm width, default the spec's)."""
    if spec.source == "synthetic":
        return Synthetic(spec)
    if spec.source == "synthetic-sparse":
        return SyntheticSparse(spec)
    if spec.source == "fashion-mnist":
        return FashionMnist(fashion_dir(spec), "train")
    width = spec.n_features if n_features is None else n_features
    return open_path(spec.source, width, base=None, role="train")


def open_test(spec: DataSpec, name: str, train: Source, n_features: int) -> Source:
    """The test source `name` (a file or fashion-mnist), read like `train` and with its feature count."""
    if name == "fashion-mnist":
        src: Source = FashionMnist(fashion_dir(spec), "t10k")
    else:
        base = train.index_base if isinstance(train, Libsvm) else None
        src = open_path(name, n_features, base=base, role="test")
    check_feature_count(n_features, src)
    return src


def check_feature_count(n_features: int, src: Source) -> None:
    """Raise InputError unless `src` has n_features features."""
    if src.n_features != n_features:
        raise InputError(
            f"feature-count mismatch: train has {n_features} features, "
            f"test ({src.name}) has {src.n_features}"
        )


def open_path(path: str, n_features: int | None, base: int | None, role: str, labels: bool = True) -> Source:
    """The source of one data file, by its extension: .npz, .h5/.hdf5, else libsvm text."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a data file")
    lower = path.lower()
    if lower.endswith(".npz"):
        return Npz(path, labels)
    if lower.endswith((".h5", ".hdf5")):
        return Hdf5(path, labels)
    return Libsvm(path, n_features, base, role)


def fashion_dir(spec: DataSpec) -> str:
    """The Fashion-MNIST directory: --data-dir, else the system dataset's."""
    return spec.data_dir if spec.data_dir is not None else DEFAULT_FASHION_DIR
