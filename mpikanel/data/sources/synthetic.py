"""Generated data: a dense linear teacher (synthetic) and CTR-like CSR rows (synthetic-sparse)."""

from __future__ import annotations

import functools
import math

import numpy as np

from mpikanel.errors import InputError
from mpikanel.kernels.base import CSR

from ..spec import DataSpec
from .base import Source

SYNTHETIC_CHUNK = 4096
_TEACHER_STREAM = 7919


class Synthetic(Source):
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


class SyntheticSparse(Source):
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
