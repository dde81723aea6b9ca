"""Classification data loading: each worker reads only its own row range where the format allows."""

from __future__ import annotations

import array
import functools
import gzip
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpikanel.errors import InputError
from mpikanel.kernels.base import CSR

DEFAULT_FASHION_DIR = "/usr/share/datasets/fashion-mnist"
SYNTHETIC_CHUNK = 4096
_TEACHER_STREAM = 7919
_IDX_UBYTE = 0x08


@dataclass(frozen=True)
class DataInfo:
    """Shape and class mapping of the training part of a data source."""

    n_rows: int
    n_features: int
    n_classes: int
    description: str
    label_values: tuple
    features_cause: str = ""   # where the feature count comes from (for size errors), e.g. a libsvm line
    row_bytes: int = 0         # bytes a training row takes in memory when rows are dense (0: CSR rows)


@dataclass
class Shard:
    """A block of rows: float32 C-contiguous features (or CSR for libsvm data) and int32 class indices."""

    X: np.ndarray | CSR
    y: np.ndarray


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


def feature_permutation(n_features: int, seed: int) -> np.ndarray:
    """The seeded permutation --permute-features applies to CSR column ids: column c becomes perm[c],
    so features popular at low ids (power-law data, ids in order of appearance) spread over the
    servers' contiguous key ranges."""
    return np.random.default_rng([seed, 0x5EED]).permutation(n_features).astype(np.int32)


def unpermute_linear(params: np.ndarray, n_features: int, seed: int) -> np.ndarray:
    """Parameters of a linear layout trained on permuted columns, in the data's own column order."""
    units = params.size // (n_features + 1)
    weights = params[:n_features * units].reshape(n_features, units)
    return np.concatenate([weights[feature_permutation(n_features, seed)].ravel(), params[n_features * units:]])


def _permuted(spec: DataSpec, shard: Shard) -> Shard:
    if not spec.permute_features:
        return shard
    X = shard.X
    if not isinstance(X, CSR):
        raise InputError("--permute-features on needs sparse (CSR) data: libsvm files or synthetic-sparse")
    return Shard(CSR(X.indptr, feature_permutation(X.shape[1], spec.seed)[X.indices], X.data, X.shape), shard.y)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def data_spec(config: Any) -> DataSpec:
    """The data source a config names."""
    return DataSpec(source=config.data, data_dir=config.data_dir, test_source=config.test_data,
                    test_fraction=config.test_fraction, seed=config.seed,
                    synthetic_rows=config.synthetic_rows, synthetic_features=config.synthetic_features,
                    synthetic_classes=config.n_classes_hint, n_features=config.n_features,
                    sparse_nnz=config.sparse_nnz, sparse_alpha=config.sparse_alpha, sparse_values=config.sparse_values,
                    permute_features=config.permute_features == "on")


def describe(spec: DataSpec) -> DataInfo:
    """Return the training part's shape and classes, validating labels; raises InputError."""
    _check_spec(spec)
    src = _open_train(spec)
    n_train = _train_rows(spec, src)
    if src.fixed_classes is not None:
        classes = src.fixed_classes
    else:
        y = _integer_labels(src.all_labels(), src, 0)
        classes = tuple(int(v) for v in np.unique(y[:n_train]))
    return DataInfo(
        n_rows=n_train,
        n_features=src.n_features,
        n_classes=len(classes),
        description=src.description,
        label_values=classes,
        features_cause=src.features_cause or f"{src.n_features} features in {src.description}",
        row_bytes=0 if isinstance(src, (_Libsvm, _SyntheticSparse)) else 4 * src.n_features,
    )


def load_rows(spec: DataSpec, info: DataInfo, start: int, stop: int) -> Shard:
    """Load training rows [start, stop) of the train part; raises InputError on bad data."""
    if not (0 <= start <= stop <= info.n_rows):
        raise InputError(
            f"row range [{start}, {stop}) is outside the training rows [0, {info.n_rows})"
        )
    src = _open_train(spec, n_features=info.n_features)
    return _permuted(spec, _read_shard(src, info, start, stop))


def load_test(spec: DataSpec, info: DataInfo) -> Shard:
    """Load the test set with the training set's feature count and class mapping."""
    return _permuted(spec, _load_test(spec, info))


def _load_test(spec: DataSpec, info: DataInfo) -> Shard:
    _check_spec(spec)
    if spec.test_source is not None:
        train = _open_train(spec, n_features=info.n_features)
        src = _open_test(spec, spec.test_source, train, info.n_features)
        return _read_shard(src, info, 0, src.n_rows)
    if spec.source == "fashion-mnist":
        src = _FashionMnist(_fashion_dir(spec), "t10k")
        _check_feature_count(info.n_features, src)
        return _read_shard(src, info, 0, src.n_rows)
    src = _open_train(spec, n_features=info.n_features)
    return _read_shard(src, info, _train_rows(spec, src), src.n_rows)


def read_file(path: str, n_features: int | None = None,
              labels: bool = True) -> tuple[np.ndarray | CSR, np.ndarray]:
    """All rows of one data file (.npz, .h5/.hdf5 or libsvm text) as (features, raw labels).

    ``labels=False``: a file without labels (an .npz/HDF5 with X only) reads with NaN labels, as
    do libsvm rows whose label is a placeholder (``?`` or ``nan``)."""
    src = _open_path(path, n_features, None, "data", labels=labels)
    X, y = src.read(0, src.n_rows)
    if not isinstance(X, CSR):
        X = np.ascontiguousarray(X, dtype=np.float32)
        _check_finite(X, src, 0)
    return X, y


def shard_range(n_rows: int, n_parts: int, part: int) -> tuple[int, int]:
    """Return [start, stop) of part `part` in a balanced contiguous split of n_rows rows."""
    if n_rows < 0 or n_parts < 1 or not (0 <= part < n_parts):
        raise InputError(f"bad shard request: n_rows={n_rows}, n_parts={n_parts}, part={part}")
    base, extra = divmod(n_rows, n_parts)
    start = part * base + min(part, extra)
    return start, start + base + (1 if part < extra else 0)


# ---------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------


def _check_spec(spec: DataSpec) -> None:
    if not (0.0 <= spec.test_fraction < 1.0):
        raise InputError(f"test fraction must be in [0, 1), got {spec.test_fraction}")
    if spec.n_features is not None and spec.n_features < 1:
        raise InputError(f"n_features must be positive, got {spec.n_features}")
    test = spec.test_source
    if test == "synthetic":
        raise InputError("test source 'synthetic' is not supported; use the test fraction instead")
    if test is not None and test != "fashion-mnist" and not os.path.exists(test):
        raise InputError(f"{test}: no such file")


def _uses_tail_split(spec: DataSpec) -> bool:
    return spec.test_source is None and spec.source != "fashion-mnist"


def _train_rows(spec: DataSpec, src: _Source) -> int:
    """Rows of `src` that belong to training (all of it unless the test set is a tail fraction)."""
    if not _uses_tail_split(spec):
        return src.n_rows
    n_train = src.n_rows - int(round(spec.test_fraction * src.n_rows))
    if n_train <= 0:
        raise InputError(
            f"{src.name}: no training rows left after holding out "
            f"test fraction {spec.test_fraction}"
        )
    return n_train


def _open_train(spec: DataSpec, n_features: int | None = None) -> _Source:
    if spec.source == "synthetic":
        return _Synthetic(spec)
    if spec.source == "synthetic-sparse":
        return _SyntheticSparse(spec)
    if spec.source == "fashion-mnist":
        return _FashionMnist(_fashion_dir(spec), "train")
    width = spec.n_features if n_features is None else n_features
    return _open_path(spec.source, width, base=None, role="train")


def _open_test(spec: DataSpec, name: str, train: _Source, n_features: int) -> _Source:
    if name == "fashion-mnist":
        src: _Source = _FashionMnist(_fashion_dir(spec), "t10k")
    else:
        base = train.index_base if isinstance(train, _Libsvm) else None
        src = _open_path(name, n_features, base=base, role="test")
    _check_feature_count(n_features, src)
    return src


def _check_feature_count(n_features: int, src: _Source) -> None:
    if src.n_features != n_features:
        raise InputError(
            f"feature-count mismatch: train has {n_features} features, "
            f"test ({src.name}) has {src.n_features}"
        )


def _open_path(path: str, n_features: int | None, base: int | None, role: str, labels: bool = True) -> _Source:
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a data file")
    lower = path.lower()
    if lower.endswith(".npz"):
        return _Npz(path, labels)
    if lower.endswith((".h5", ".hdf5")):
        return _Hdf5(path, labels)
    return _Libsvm(path, n_features, base, role)


def _read_shard(src: _Source, info: DataInfo, start: int, stop: int) -> Shard:
    """Read global rows [start, stop) of `src`, validate them and map labels to classes."""
    X, y_raw = src.read(start, stop)
    if isinstance(X, CSR):
        _check_finite_csr(X, src, start)
    else:
        X = np.ascontiguousarray(X, dtype=np.float32)
        _check_finite(X, src, start)
    y = _integer_labels(y_raw, src, start)
    return Shard(X=X, y=_map_labels(y, info.label_values, src, start))


def _check_finite(X: np.ndarray, src: _Source, offset: int) -> None:
    finite_rows = np.isfinite(X).all(axis=1)
    if not finite_rows.all():
        row = offset + int(np.flatnonzero(~finite_rows)[0])
        raise InputError(f"{src.name}: non-finite feature value (NaN/inf) at {src.where(row)}")


def _check_finite_csr(X: CSR, src: _Source, offset: int) -> None:
    bad = ~np.isfinite(X.data)
    if bad.any():
        row = offset + int(np.searchsorted(X.indptr, int(np.flatnonzero(bad)[0]), "right") - 1)
        raise InputError(f"{src.name}: non-finite feature value (NaN/inf) at {src.where(row)}")


def _integer_labels(y: np.ndarray, src: _Source, offset: int) -> np.ndarray:
    """Check labels are integer-valued and return them as int64."""
    if y.dtype.kind in "biu":
        return y.astype(np.int64)
    if y.dtype.kind != "f":
        raise InputError(f"{src.name}: y has unsupported dtype {y.dtype}; labels must be integers")
    bad = ~np.isfinite(y) | (y != np.round(y))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if np.isnan(y[i]):
            raise InputError(f"{src.name}: no label at {src.where(offset + i)}; training needs a label on every row")
        raise InputError(f"{src.name}: y has non-integer label {y[i]:g} at {src.where(offset + i)}")
    return y.astype(np.int64)


def _map_labels(y: np.ndarray, label_values: tuple, src: _Source, offset: int) -> np.ndarray:
    """Map original labels to class indices; a label unseen in training is an InputError."""
    values = np.asarray(label_values, dtype=np.int64)
    idx = np.searchsorted(values, y)
    idx_clipped = np.minimum(idx, len(values) - 1)
    unseen = values[idx_clipped] != y
    if unseen.any():
        i = int(np.flatnonzero(unseen)[0])
        shown = ", ".join(str(v) for v in label_values[:20]) + (", ..." if len(values) > 20 else "")
        raise InputError(
            f"{src.name}: label {int(y[i])} at {src.where(offset + i)} "
            f"does not occur in the training labels ({shown})"
        )
    return idx_clipped.astype(np.int32)


def _check_x_shape(name: str, shape: tuple, dtype: np.dtype) -> None:
    if len(shape) != 2:
        raise InputError(f"{name}: X must be 2-D, got shape {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise InputError(f"{name}: data is empty (X has shape {shape})")
    if dtype.kind not in "biuf":
        raise InputError(f"{name}: X has unsupported dtype {dtype}; expected numbers")


def _check_y_shape(name: str, y_shape: tuple, n_rows: int) -> None:
    if len(y_shape) != 1:
        raise InputError(f"{name}: y must be 1-D, got shape {y_shape}")
    if y_shape[0] != n_rows:
        raise InputError(f"{name}: y has {y_shape[0]} labels but X has {n_rows} rows")


# ---------------------------------------------------------------------------
# Sources. Each has: name, description, n_rows (total), n_features, fixed_classes,
# where(row), all_labels(), read(start, stop) -> (X, raw y).
# ---------------------------------------------------------------------------


class _Source:
    name: str
    description: str
    n_rows: int
    n_features: int
    fixed_classes: tuple | None = None
    features_cause: str = ""    # why n_features is what it is, when a single entry decides it

    def where(self, row: int) -> str:
        """Human-readable location of global row `row`."""
        return f"row {row}"

    def all_labels(self) -> np.ndarray:
        """All raw labels of the source."""
        raise NotImplementedError

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw features and labels of rows [start, stop)."""
        raise NotImplementedError


class _Synthetic(_Source):
    """Linear teacher with Gumbel noise; rows come in independently seeded chunks."""

    def __init__(self, spec: DataSpec) -> None:
        minimums = (("synthetic_rows", 1), ("synthetic_features", 1), ("synthetic_classes", 2))
        for field, low in minimums:
            if getattr(spec, field) < low:
                raise InputError(f"{field} must be at least {low}, got {getattr(spec, field)}")
        self.seed = spec.seed
        self.n_rows = spec.synthetic_rows
        self.n_features = spec.synthetic_features
        self.n_classes = spec.synthetic_classes
        self.name = "synthetic"
        self.description = (
            f"synthetic {self.n_rows}x{self.n_features}, {self.n_classes} classes"
        )
        self.fixed_classes = tuple(range(self.n_classes))
        self.features_cause = f"--synthetic-features {self.n_features}"

    @functools.cached_property
    def w(self) -> np.ndarray:
        """The teacher's weights (made when rows are first drawn: describing the data allocates nothing)."""
        teacher_rng = np.random.default_rng([self.seed, _TEACHER_STREAM])
        w = teacher_rng.standard_normal((self.n_features, self.n_classes))
        # Each logit is ~N(0, scale^2) vs unit Gumbel noise; this scale keeps the Bayes
        # accuracy near 0.88-0.9 for 2..100 classes, so a linear model lands around 85%.
        scale = 3.0 + 3.0 * math.log2(self.n_classes / 2)
        return w * (scale / math.sqrt(self.n_features))

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, c])
        X = rng.standard_normal((SYNTHETIC_CHUNK, self.n_features), dtype=np.float32)
        noise = rng.gumbel(size=(SYNTHETIC_CHUNK, self.n_classes))
        y = np.argmax(X.astype(np.float64) @ self.w + noise, axis=1)
        return X, y

    def all_labels(self) -> np.ndarray:
        return self.read(0, self.n_rows)[1]

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        X = np.empty((stop - start, self.n_features), dtype=np.float32)
        y = np.empty(stop - start, dtype=np.int64)
        for c in range(start // SYNTHETIC_CHUNK, -(-stop // SYNTHETIC_CHUNK)):
            lo = max(start, c * SYNTHETIC_CHUNK)
            hi = min(stop, (c + 1) * SYNTHETIC_CHUNK)
            Xc, yc = self._chunk(c)
            off = c * SYNTHETIC_CHUNK
            X[lo - start : hi - start] = Xc[lo - off : hi - off]
            y[lo - start : hi - start] = yc[lo - off : hi - off]
        return X, y


SPARSE_VALUES = ("binary", "tfidf")
_SPARSE_STREAM = 0x73707273        # "sprs"
_WEIGHT_STREAM = 0x77747275        # "wtru"
_WEIGHT_DENSITY = 0.1              # share of features with a nonzero true weight
_MARGIN_STD = 3.0                  # std of the true margin: Bayes accuracy ~0.85


class _SyntheticSparse(_Source):
    """CTR-like binary problem as CSR rows: power-law feature popularity, logistic labels.

    Row r has ``sparse_nnz`` feature draws (duplicates dropped) from a bounded power law: feature f
    is drawn with probability ~ (f + 1)^-alpha, so low ids are popular (as in hashed CTR data
    before any permutation). Values are 1 (``binary``) or idf-like weights log(1 + 1/p_f) scaled to
    a unit row norm (``tfidf``). Labels: y ~ Bernoulli(sigmoid(s * (x.w - b))), where w is a sparse
    true weight vector (10% of features, N(0, 1), a function of the feature id and seed, so 10M
    features need no table), b the median of x.w over a seeded sample (popular features are in
    most rows and would tilt the classes) and s sets the margin's std to about 3. Rows come in
    independently seeded chunks.
    """

    def __init__(self, spec: DataSpec) -> None:
        for field_name, low in (("synthetic_rows", 1), ("synthetic_features", 2), ("sparse_nnz", 1)):
            if getattr(spec, field_name) < low:
                raise InputError(f"{field_name} must be at least {low}, got {getattr(spec, field_name)}")
        if not (math.isfinite(spec.sparse_alpha) and spec.sparse_alpha > 0):
            raise InputError(f"--sparse-alpha must be a finite number > 0, got {spec.sparse_alpha}")
        if spec.sparse_values not in SPARSE_VALUES:
            raise InputError(f"--sparse-values must be one of {', '.join(SPARSE_VALUES)}, got '{spec.sparse_values}'")
        self.seed, self.n_rows, self.n_features = spec.seed, spec.synthetic_rows, spec.synthetic_features
        self.nnz, self.alpha, self.values = spec.sparse_nnz, float(spec.sparse_alpha), spec.sparse_values
        self.name = "synthetic-sparse"
        self.description = (f"synthetic-sparse {self.n_rows}x{self.n_features}, ~{self.nnz} nnz/row, "
                            f"power law {self.alpha:g}, {self.values}")
        self.fixed_classes = (0, 1)
        sample = self._rows(np.random.default_rng([self.seed, _SPARSE_STREAM, 2**32]))[3]
        self.bias = float(np.median(sample))
        spread = float(np.std(sample))
        self.scale = _MARGIN_STD / spread if spread > 0 else 1.0

    def feature_ids(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF of the bounded continuous power law on [1, n+1), floored to ids 0..n-1."""
        n, a = self.n_features, self.alpha
        if abs(a - 1.0) < 1e-9:
            x = np.exp(u * math.log(n + 1.0))
        else:
            x = (1.0 + u * ((n + 1.0) ** (1.0 - a) - 1.0)) ** (1.0 / (1.0 - a))
        return np.minimum(np.floor(x).astype(np.int64) - 1, n - 1)

    def true_weights(self, ids: np.ndarray) -> np.ndarray:
        """The true weight of each feature id (a pure function of id and seed)."""
        u1, u2, u3 = (_hash_uniform(ids, self.seed, _WEIGHT_STREAM + k) for k in range(3))
        z = np.sqrt(-2.0 * np.log(np.maximum(u2, 1e-300))) * np.cos(2.0 * np.pi * u3)
        return np.where(u1 < _WEIGHT_DENSITY, z, 0.0)

    def _rows(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One chunk's rows as (indptr, indices, values, raw margin x.w)."""
        ids = np.sort(self.feature_ids(rng.random((SYNTHETIC_CHUNK, self.nnz))), axis=1)
        keep = np.ones(ids.shape, dtype=bool)
        keep[:, 1:] = ids[:, 1:] != ids[:, :-1]             # duplicates within a row dropped
        indices = ids[keep]
        indptr = np.zeros(SYNTHETIC_CHUNK + 1, dtype=np.int64)
        np.cumsum(keep.sum(axis=1), out=indptr[1:])
        if self.values == "binary":
            data = np.ones(indices.size)
        else:
            ranks = indices + 1.0
            p = ranks ** -self.alpha / _zeta_head(self.alpha, self.n_features)
            data = np.log1p(1.0 / p)
            norms = np.sqrt(np.add.reduceat(data * data, indptr[:-1]))
            data /= np.repeat(norms, np.diff(indptr))
        return indptr, indices, data, np.add.reduceat(data * self.true_weights(indices), indptr[:-1])

    def _chunk(self, c: int) -> tuple[CSR, np.ndarray]:
        rng = np.random.default_rng([self.seed, _SPARSE_STREAM, c])
        indptr, indices, data, raw = self._rows(rng)
        margin = (raw - self.bias) * self.scale
        y = (rng.random(SYNTHETIC_CHUNK) < 0.5 * (1.0 + np.tanh(0.5 * margin))).astype(np.int64)
        X = CSR(indptr, indices.astype(np.int32), data.astype(np.float32), (SYNTHETIC_CHUNK, self.n_features))
        return X, y

    def all_labels(self) -> np.ndarray:
        return self.read(0, self.n_rows)[1]

    def read(self, start: int, stop: int) -> tuple[CSR, np.ndarray]:
        parts, ys = [], []
        for c in range(start // SYNTHETIC_CHUNK, -(-stop // SYNTHETIC_CHUNK)):
            off = c * SYNTHETIC_CHUNK
            Xc, yc = self._chunk(c)
            lo, hi = max(start, off) - off, min(stop, off + SYNTHETIC_CHUNK) - off
            parts.append(Xc.rows(lo, hi))
            ys.append(yc[lo:hi])
        return _stack_csr(parts, self.n_features), np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)


def _zeta_head(alpha: float, n: int) -> float:
    """sum_{k=1..n} k^-alpha (exact to 1e6 terms, then the integral tail): the power law's norm."""
    m = min(n, 1_000_000)
    head = float(np.sum(np.arange(1, m + 1, dtype=np.float64) ** -alpha))
    if n > m:
        head += ((n + 0.5) ** (1 - alpha) - (m + 0.5) ** (1 - alpha)) / (1 - alpha) if alpha != 1 else \
            math.log((n + 0.5) / (m + 0.5))
    return head


def _hash_uniform(ids: np.ndarray, seed: int, stream: int) -> np.ndarray:
    """Uniform [0, 1) per id from a vectorized SplitMix64 of (stream, seed, id)."""
    with np.errstate(over="ignore"):
        x = ids.astype(np.uint64) ^ np.uint64((stream * 0x9E3779B97F4A7C15 + seed * 0xD1B54A32D192ED03) & (2**64 - 1))
        x = (x + np.uint64(0x9E3779B97F4A7C15))
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _stack_csr(parts: list, n_features: int) -> CSR:
    """Row-wise concatenation of CSR blocks."""
    if not parts:
        return CSR(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32),
                   (0, n_features))
    indptr = [np.zeros(1, dtype=np.int64)]
    offset = 0
    for p in parts:
        indptr.append(p.indptr[1:] + offset)
        offset += int(p.indptr[-1])
    return CSR(np.concatenate(indptr), np.concatenate([p.indices for p in parts]),
               np.concatenate([p.data for p in parts]), (sum(p.shape[0] for p in parts), n_features))


def _fashion_dir(spec: DataSpec) -> str:
    return spec.data_dir if spec.data_dir is not None else DEFAULT_FASHION_DIR


class _FashionMnist(_Source):
    """Fashion-MNIST IDX files (gzip'd or plain); pixels scaled to [0, 1]."""

    def __init__(self, directory: str, part: str) -> None:
        self.images = _find_idx(directory, f"{part}-images-idx3-ubyte")
        labels_path = _find_idx(directory, f"{part}-labels-idx1-ubyte")
        self.name = self.images
        self.description = f"fashion-mnist {part} ({directory})"
        self.fixed_classes = tuple(range(10))
        dims, self.header_bytes = _idx_header(self.images, 3)
        self.n_rows = dims[0]
        self.n_features = dims[1] * dims[2]
        self.labels = _idx_read_all(labels_path, 1)
        if len(self.labels) != self.n_rows:
            raise InputError(
                f"{labels_path}: has {len(self.labels)} labels "
                f"but {self.images} has {self.n_rows} images"
            )
        if self.labels.size and self.labels.max() > 9:
            i = int(np.flatnonzero(self.labels > 9)[0])
            raise InputError(f"{labels_path}: label {self.labels[i]} at row {i} is not in 0..9")
        if self.n_rows == 0:
            raise InputError(f"{self.images}: data is empty")

    def all_labels(self) -> np.ndarray:
        return self.labels

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        n_bytes = (stop - start) * self.n_features
        with _open_maybe_gzip(self.images) as f:
            try:
                f.seek(self.header_bytes + start * self.n_features)
                raw = f.read(n_bytes)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(f"{self.images}: cannot read: {exc}") from None
        if len(raw) != n_bytes:
            raise InputError(f"{self.images}: file is truncated")
        pixels = np.frombuffer(raw, dtype=np.uint8).reshape(stop - start, self.n_features)
        return pixels.astype(np.float32) / np.float32(255.0), self.labels[start:stop]


def _find_idx(directory: str, stem: str) -> str:
    for candidate in (stem + ".gz", stem):
        path = os.path.join(directory, candidate)
        if os.path.isfile(path):
            return path
    where = "directory does not exist" if not os.path.isdir(directory) else f"{stem}[.gz] not found"
    raise InputError(
        f"fashion-mnist data not found in {directory} ({where}); "
        "run `apt-get install dataset-fashion-mnist` or pass --data-dir"
    )


def _open_maybe_gzip(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _idx_header(path: str, ndim: int) -> tuple[tuple[int, ...], int]:
    """Parse an IDX header, returning the dims and the header size in bytes."""
    try:
        with _open_maybe_gzip(path) as f:
            head = f.read(4 + 4 * ndim)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] != _IDX_UBYTE or head[3] != ndim:
        magic = head[:4].hex() if head else "empty file"
        raise InputError(
            f"{path}: not a {ndim}-D unsigned-byte IDX file (bad magic number 0x{magic})"
        )
    if len(head) != 4 + 4 * ndim:
        raise InputError(f"{path}: file is truncated")
    dims = tuple(int(d) for d in np.frombuffer(head[4:], dtype=">u4"))
    return dims, len(head)


def _idx_read_all(path: str, ndim: int) -> np.ndarray:
    dims, header = _idx_header(path, ndim)
    n_bytes = int(np.prod(dims))
    try:
        with _open_maybe_gzip(path) as f:
            f.seek(header)
            raw = f.read(n_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    if len(raw) != n_bytes:
        raise InputError(f"{path}: file is truncated")
    return np.frombuffer(raw, dtype=np.uint8).reshape(dims)


class _Npz(_Source):
    """An .npz archive with X (2-D) and y (1-D); row ranges are read without loading all of X."""

    def __init__(self, path: str, labels: bool = True) -> None:
        self.name = self.description = path
        members = self._members()
        missing = [a for a in ("X", "y") if a + ".npy" not in members and (labels or a == "X")]
        if missing:
            present = ", ".join(sorted(m[:-4] for m in members if m.endswith(".npy"))) or "none"
            raise InputError(
                f"{path}: missing array(s) {', '.join(missing)}; arrays present: {present}"
            )
        with self._zip() as zf, zf.open("X.npy") as f:
            shape, self.fortran, self.dtype, self.header_bytes = self._header(f, "X")
        _check_x_shape(path, shape, self.dtype)
        self.n_rows, self.n_features = shape
        self.row_bytes = self.n_features * self.dtype.itemsize
        self.y = self._load_member("y") if "y.npy" in members else np.full(self.n_rows, np.nan)
        _check_y_shape(path, self.y.shape, self.n_rows)

    def _zip(self) -> zipfile.ZipFile:
        try:
            return zipfile.ZipFile(self.name)
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"{self.name}: not a valid .npz file ({exc})") from None

    def _members(self) -> list[str]:
        with self._zip() as zf:
            return zf.namelist()

    def _header(self, f, array: str) -> tuple[tuple, bool, np.dtype, int]:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                # 3.0 differs from 2.0 only in allowing utf-8 in the header text.
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except (ValueError, OSError, zlib.error) as exc:
            raise InputError(f"{self.name}: {array}.npy has a bad npy header ({exc})") from None
        return shape, fortran, dtype, f.tell()

    def _load_member(self, array: str) -> np.ndarray:
        try:
            with self._zip() as zf, zf.open(array + ".npy") as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except (ValueError, OSError, zlib.error, EOFError) as exc:
            raise InputError(f"{self.name}: cannot read {array}.npy ({exc})") from None

    def all_labels(self) -> np.ndarray:
        return self.y

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        if self.fortran:
            return self._load_member("X")[start:stop], self.y[start:stop]
        n_bytes = (stop - start) * self.row_bytes
        try:
            with self._zip() as zf, zf.open("X.npy") as f:
                # Seeking a deflated member decompresses up to the offset; no full load.
                f.seek(self.header_bytes + start * self.row_bytes)
                raw = f.read(n_bytes)
        except (OSError, zlib.error, EOFError) as exc:
            raise InputError(f"{self.name}: cannot read X.npy ({exc})") from None
        if len(raw) != n_bytes:
            raise InputError(f"{self.name}: X.npy is truncated")
        X = np.frombuffer(raw, dtype=self.dtype).reshape(stop - start, self.n_features)
        return X, self.y[start:stop]


class _Hdf5(_Source):
    """An HDF5 file with datasets X (2-D) and y (1-D); row ranges are h5py slices."""

    def __init__(self, path: str, labels: bool = True) -> None:
        self.name = self.description = path
        with self._file() as f:
            missing = [a for a in ("X", "y") if not isinstance(f.get(a), _h5py().Dataset) and (labels or a == "X")]
            if missing:
                present = ", ".join(sorted(f.keys())) or "none"
                raise InputError(
                    f"{path}: missing dataset(s) {', '.join(missing)}; present: {present}"
                )
            _check_x_shape(path, f["X"].shape, f["X"].dtype)
            self.n_rows, self.n_features = f["X"].shape
            self.y = f["y"][()] if "y" in f else np.full(self.n_rows, np.nan)
        _check_y_shape(path, self.y.shape, self.n_rows)

    def _file(self):
        h5py = _h5py()
        try:
            return h5py.File(self.name, "r")
        except OSError as exc:
            raise InputError(f"{self.name}: not a valid HDF5 file ({exc})") from None

    def all_labels(self) -> np.ndarray:
        return self.y

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        with self._file() as f:
            return f["X"][start:stop], self.y[start:stop]


def _h5py():
    import h5py  # imported lazily: only HDF5 users pay for it

    return h5py


class _Libsvm(_Source):
    """libsvm/svmlight text, parsed whole; row ranges come out as CSR (never densified)."""

    def __init__(self, path: str, n_features: int | None, base: int | None, role: str) -> None:
        self.name = self.description = path
        st = os.stat(path)
        self.labels, self.lines, self.row_ptr, self.cols, self.vals = _parse_libsvm(
            path, st.st_size, st.st_mtime_ns
        )
        self.n_rows = len(self.labels)
        if self.n_rows == 0:
            raise InputError(f"{path}: data is empty (no data lines)")
        has_zero = bool(self.cols.size) and int(self.cols.min()) == 0
        self.index_base = base if base is not None else (0 if has_zero else 1)
        if self.index_base == 1 and has_zero:
            line = self._line_of_entry(int(np.flatnonzero(self.cols == 0)[0]))
            raise InputError(
                f"{path}:{line}: feature index 0, but the train file uses 1-based indices"
            )
        max_index = int(self.cols.max()) if self.cols.size else self.index_base - 1
        needed = max_index + 1 - self.index_base
        if n_features is None:
            if needed == 0:
                raise InputError(f"{path}: data is empty (no feature values)")
            self.n_features = needed
            line = self._line_of_entry(int(np.argmax(self.cols)))
            self.features_cause = f"feature index {max_index} in {path} line {line}"
        elif needed > n_features:
            line = self._line_of_entry(int(np.argmax(self.cols)))
            if role == "test":
                raise InputError(
                    f"feature-count mismatch: train has {n_features} features, "
                    f"test ({path}) has {needed} (index {max_index} at line {line})"
                )
            raise InputError(
                f"{path}:{line}: feature index {max_index} exceeds n_features={n_features}"
            )
        else:
            self.n_features = n_features
            self.features_cause = f"--n-features {n_features}"

    def _line_of_entry(self, entry: int) -> int:
        """Line number of the row holding CSR entry `entry`."""
        return int(self.lines[np.searchsorted(self.row_ptr, entry, "right") - 1])

    def where(self, row: int) -> str:
        return f"row {row} (line {self.lines[row]})"

    def all_labels(self) -> np.ndarray:
        return self.labels

    def read(self, start: int, stop: int) -> tuple[CSR, np.ndarray]:  # type: ignore[override]
        lo, hi = int(self.row_ptr[start]), int(self.row_ptr[stop])
        X = CSR(self.row_ptr[start : stop + 1] - lo, self.cols[lo:hi] - self.index_base,
                self.vals[lo:hi], (stop - start, self.n_features))
        return X, self.labels[start:stop]


@functools.lru_cache(maxsize=4)
def _parse_libsvm(path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, ...]:
    """Parse a libsvm file into labels, line numbers and CSR arrays (cached by path+stat)."""
    del size, mtime_ns  # part of the cache key only
    # line by line into C arrays (8 or 4 bytes an entry; a Python list of numbers takes ~40)
    labels = array.array("d")
    lines = array.array("q")
    row_ptr = array.array("q", [0])
    cols = array.array("q")
    vals = array.array("f")
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                tokens = line.split("#", 1)[0].split()
                if not tokens:
                    continue
                labels.append(_parse_label(tokens[0], path, lineno))
                for tok in tokens[1:]:
                    if tok.startswith("qid:"):
                        continue
                    idx, val = _parse_pair(tok, path, lineno)
                    cols.append(idx)
                    vals.append(val)
                lines.append(lineno)
                row_ptr.append(len(cols))
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (and not .npz/.h5/.hdf5)") from None
    # frombuffer: the arrays' memory becomes the numpy arrays' (no second copy at the peak)
    return (
        np.frombuffer(labels, dtype=np.float64),
        np.frombuffer(lines, dtype=np.int64),
        np.frombuffer(row_ptr, dtype=np.int64),
        np.frombuffer(cols, dtype=np.int64),
        np.frombuffer(vals, dtype=np.float32),
    )


#: libsvm label tokens that stand for "no label" (rows to predict); they read as NaN
LABEL_PLACEHOLDERS = ("?", "nan", "NaN", "NA")


def _parse_label(tok: str, path: str, lineno: int) -> float:
    if tok in LABEL_PLACEHOLDERS:
        return math.nan
    try:
        return float(tok)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad label {tok!r} (expected a number)") from None


def _parse_pair(tok: str, path: str, lineno: int) -> tuple[int, float]:
    idx_s, sep, val_s = tok.partition(":")
    if not sep:
        raise InputError(f"{path}:{lineno}: expected index:value, got {tok!r}")
    try:
        idx = int(idx_s)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad feature index {idx_s!r} in {tok!r}") from None
    if idx < 0:
        raise InputError(f"{path}:{lineno}: negative feature index {idx}")
    try:
        return idx, float(val_s)
    except ValueError:
        raise InputError(f"{path}:{lineno}: bad feature value {val_s!r} in {tok!r}") from None
