"""Rows out of a data source: a worker's block of the training part, the test set, or a whole file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpikanel.errors import InputError
from mpikanel.kernels.base import CSR

from .describe import DataInfo, train_rows
from .permute import feature_permutation
from .sources import FashionMnist, Source, check_feature_count, fashion_dir, open_path, open_test, open_train
from .spec import DataSpec, check_spec
from .validate import check_finite, check_finite_csr, integer_labels, map_labels


@dataclass
class Shard:
    """A block of rows: float32 C-contiguous features (or CSR for libsvm data) and int32 class indices."""

    X: np.ndarray | CSR
    y: np.ndarray


def load_rows(spec: DataSpec, info: DataInfo, start: int, stop: int) -> Shard:
    """Load training rows [start, stop) of the train part; raises InputError on bad data."""
    if not (0 <= start <= stop <= info.n_rows):
        raise InputError(
            f"row range [{start}, {stop}) is outside the training rows [0, {info.n_rows})"
        )
    src = open_train(spec, n_features=info.n_features)
    return _permuted(spec, _read_shard(src, info, start, stop))


def load_test(spec: DataSpec, info: DataInfo) -> Shard:
    """Load the test set with the training set's feature count and class mapping."""
    return _permuted(spec, _load_test(spec, info))


def _load_test(spec: DataSpec, info: DataInfo) -> Shard:
    check_spec(spec)
    if spec.test_source is not None:
        train = open_train(spec, n_features=info.n_features)
        src = open_test(spec, spec.test_source, train, info.n_features)
        return _read_shard(src, info, 0, src.n_rows)
    if spec.source == "fashion-mnist":
        src = FashionMnist(fashion_dir(spec), "t10k")
        check_feature_count(info.n_features, src)
        return _read_shard(src, info, 0, src.n_rows)
    src = open_train(spec, n_features=info.n_features)
    return _read_shard(src, info, train_rows(spec, src), src.n_rows)


def read_file(path: str, n_features: int | None = None,
              labels: bool = True) -> tuple[np.ndarray | CSR, np.ndarray]:
    """All rows of one data file (.npz, .h5/.hdf5 or libsvm text) as (features, raw labels).

    ``labels=False``: a file without labels (an .npz/HDF5 with X only) reads with NaN labels, as
    do libsvm rows whose label is a placeholder (``?`` or ``nan``)."""
    src = open_path(path, n_features, None, "data", labels=labels)
    X, y = src.read(0, src.n_rows)
    if not isinstance(X, CSR):
        X = np.ascontiguousarray(X, dtype=np.float32)
        check_finite(X, src, 0)
    return X, y


def shard_range(n_rows: int, n_parts: int, part: int) -> tuple[int, int]:
    """Return [start, stop) of part `part` in a balanced contiguous split of n_rows rows."""
    if n_rows < 0 or n_parts < 1 or not (0 <= part < n_parts):
        raise InputError(f"bad shard request: n_rows={n_rows}, n_parts={n_parts}, part={part}")
    base, extra = divmod(n_rows, n_parts)
    start = part * base + min(part, extra)
    return start, start + base + (1 if part < extra else 0)


def _permuted(spec: DataSpec, shard: Shard) -> Shard:
    if not spec.permute_features:
        return shard
    X = shard.X
    if not isinstance(X, CSR):
        raise InputError("--permute-features on needs sparse (CSR) data: libsvm files or synthetic-sparse")
    return Shard(CSR(X.indptr, feature_permutation(X.shape[1], spec.seed)[X.indices], X.data, X.shape), shard.y)


def _read_shard(src: Source, info: DataInfo, start: int, stop: int) -> Shard:
    """Read global rows [start, stop) of `src`, validate them and map labels to classes."""
    X, y_raw = src.read(start, stop)
    if isinstance(X, CSR):
        check_finite_csr(X, src, start)
    else:
        X = np.ascontiguousarray(X, dtype=np.float32)
        check_finite(X, src, start)
    y = integer_labels(y_raw, src, start)
    return Shard(X=X, y=map_labels(y, info.label_values, src, start))
