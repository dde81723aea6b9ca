"""The trained model out of a run: one small HDF5 file, loaded without MPI, in scikit-learn's conventions.

Layout of a model file (``--save-model PATH``, :func:`export_checkpoint`):
  attrs     format "mpikanel-model", schema, mpikanel version, model (name), hidden, activation,
            n_features, classes (JSON list of the original label values, class index order),
            config (JSON of the run's TrainConfig); factory (``py:`` models only: ``py:/ABS/FILE.py:FACTORY``,
            which load_model imports again to rebuild the model)
  /params   the final global parameters (float64), in the kernels' layout (``mpikanel/layout.py``)

:class:`TrainedModel` computes scores with numpy from that layout (no numba, no MPI), so it
works on any machine with numpy and h5py; dense arrays and scipy.sparse matrices are accepted.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .layout import LINEAR_MODELS, linear_views, mlp_views, units_of

FORMAT = "mpikanel-model"
SCHEMA = 1
PROBABILISTIC = ("logistic", "softmax", "mlp")


def save_model(path: str | Path, params: np.ndarray, config: dict, n_features: int, classes: tuple) -> Path:
    """Write the final parameters and what is needed to use them; atomic (temporary file, rename)."""
    import h5py

    from ._version import __version__

    if config.get("permute_features") == "on":     # trained on permuted columns: back to the data's order
        from .data import unpermute_linear

        params = unpermute_linear(np.asarray(params), int(n_features), int(config["seed"]))
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs.update(format=FORMAT, schema=SCHEMA, mpikanel_version=__version__, model=str(config["model"]),
                           hidden=int(config.get("hidden", 64)), activation=str(config.get("activation", "relu")),
                           n_features=int(n_features), classes=json.dumps([_plain(c) for c in classes]),
                           config=json.dumps(config, default=str))
            if str(config["model"]).startswith("py:"):
                from .models.spec import absolute_spec

                f.attrs["factory"] = absolute_spec(str(config["model"]))
            f.create_dataset("params", data=np.asarray(params, dtype=np.float64))
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{p}: cannot write the model: {exc.strerror or exc}") from None
    return p


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def load_model(path: str | Path, factory: str | None = None) -> "TrainedModel":
    """Read a model file written by ``--save-model`` (or exported from a checkpoint).

    A ``py:`` model is rebuilt by importing its factory again: the file it records, or `factory`
    (``py:FILE.py:FACTORY``) when the file has moved."""
    import h5py

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such model file")
    try:
        with h5py.File(p, "r", locking=False) as f:
            a = f.attrs
            if a.get("format") != FORMAT:
                raise InputError(f"{p}: not an mpikanel model file (a checkpoint? export it with "
                                 f"python -m mpikanel.predict --export CKPT --model OUT)")
            if int(a.get("schema", -1)) != SCHEMA:
                raise InputError(f"{p}: model schema {a.get('schema')}, this mpikanel reads schema {SCHEMA}")
            return TrainedModel(f["params"][()], str(a["model"]), int(a["n_features"]),
                                tuple(json.loads(a["classes"])), int(a["hidden"]), str(a["activation"]),
                                json.loads(a["config"]), factory=factory or a.get("factory"))
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise InputError(f"{p}: corrupted or truncated model file ({str(exc).splitlines()[0] if str(exc) else exc!r})") from None


def export_checkpoint(checkpoint: str | Path, path: str | Path) -> Path:
    """Write a checkpoint's global parameters as a model file (the data is described again for its labels)."""
    from .checkpoint import load
    from .config import known_settings, make_config
    from .session import data_info

    ckpt = load(checkpoint, worker_arrays=False)
    config = make_config(known_settings(ckpt.config))
    info = data_info(config)
    return save_model(path, ckpt.params, config.to_dict(), info.n_features, info.label_values)


def _matmul(X: Any, W: np.ndarray) -> np.ndarray:
    """X @ W for a dense array, a scipy.sparse matrix or an mpikanel CSR block."""
    if _is_csr(X):
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        out = np.zeros((X.shape[0], W.shape[1]))
        np.add.at(out, rows, X.data[:, None].astype(np.float64) * W[X.indices])
        return out
    return np.asarray(X @ W, dtype=np.float64)


def _is_csr(X: Any) -> bool:
    """An mpikanel CSR block (duck-typed: importing mpikanel.kernels would load numba)."""
    return type(X).__name__ == "CSR" and hasattr(X, "indptr") and not hasattr(X, "tocsr")


class TrainedModel:
    """A trained mpikanel model: ``predict``, ``decision_function``, ``score`` and, for the models with
    probabilities (logistic, softmax, mlp), ``predict_proba``; attributes ``classes_``, ``n_features_in_``."""

    def __init__(self, params: np.ndarray, model: str, n_features: int, classes: tuple, hidden: int = 64,
                 activation: str = "relu", config: dict | None = None, factory: str | None = None) -> None:
        self.gradient_model = None
        if model.startswith("py:"):
            self._init_python(params, model, n_features, classes, config, factory or model)
            return
        if model not in LINEAR_MODELS and model != "mlp":
            raise InputError(f"model {model!r}: only the built-in models ({', '.join(LINEAR_MODELS)}, mlp) can be "
                             f"loaded without their kernels")
        self.model, self.n_features_in_, self.config = model, int(n_features), dict(config or {})
        self.classes_ = np.asarray(classes)
        self.params = np.asarray(params, dtype=np.float64)
        d, C = self.n_features_in_, len(classes)
        try:
            if model == "mlp":
                self.W1, self.W2, self.b1, self.b2 = mlp_views(self.params, d, C)
            else:
                self.W, self.b = linear_views(self.params, d, units_of(model, C))
        except ValueError:
            raise InputError(f"{model}: {self.params.size} parameters do not fit {d} features and {C} classes") from None
        if model == "mlp":
            if activation not in ("relu", "tanh"):
                raise InputError(f"mlp: unknown activation {activation!r}")
            self.activation = activation

    def _init_python(self, params: np.ndarray, model: str, n_features: int, classes: tuple, config: dict | None,
                     factory: str) -> None:
        """A ``py:`` model: its GradientModel rebuilt by the factory, rows reshaped as in training."""
        from .models import model_from_spec, parse_shape

        self.model, self.n_features_in_, self.config = model, int(n_features), dict(config or {})
        self.classes_ = np.asarray(classes)
        self.params = np.asarray(params, dtype=np.float64)
        self.input_shape = parse_shape(self.config.get("input_shape"))
        self.gradient_model = model_from_spec(str(factory), self.n_features_in_, len(classes), self.input_shape,
                                              threads=int(self.config.get("threads", 1)))
        size = self.gradient_model.initial(self.n_features_in_, len(classes), np.random.default_rng(0)).size
        if size != self.params.size:
            raise InputError(f"{model}: the factory builds {size} parameters, the file holds {self.params.size}")

    def _check(self, X: Any) -> Any:
        if _is_csr(X):
            Xc = X
        elif hasattr(X, "tocsr") and hasattr(X, "shape"):          # scipy.sparse: kept sparse
            Xc = X.tocsr()
        else:
            Xc = np.asarray(X, dtype=np.float64)
            if Xc.ndim == 1:
                Xc = Xc[None, :]
        if len(Xc.shape) != 2 or Xc.shape[1] != self.n_features_in_:
            raise InputError(f"X has {Xc.shape[-1]} features, the model was trained on {self.n_features_in_}")
        return Xc

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores per class (n, C); logistic: one score per row (n,), > 0 means classes_[1]."""
        if self.gradient_model is not None:
            raise AttributeError(f"{self.model}: a py: model gives classes (predict), not scores")
        X = self._check(X)
        if self.model == "mlp":
            h = _matmul(X, self.W1) + self.b1
            h = np.maximum(h, 0.0) if self.activation == "relu" else np.tanh(h)
            return h @ self.W2.T + self.b2
        z = _matmul(X, self.W) + self.b
        return z[:, 0] if self.model == "logistic" else z

    def predict(self, X: Any) -> np.ndarray:
        """The predicted label of each row (the original label values, as trained)."""
        if self.gradient_model is not None:
            from .models.gradient import _Predict

            Xd = self._check(X)
            if not isinstance(Xd, np.ndarray):
                raise InputError(f"{self.model}: py: models take dense rows")
            shape = (-1, *self.input_shape) if self.input_shape else None
            rows = np.ascontiguousarray(Xd, dtype=np.float32)
            return self.classes_[_Predict(self.gradient_model, shape)(self.params, rows, len(self.classes_))]
        z = self.decision_function(X)
        return self.classes_[(z > 0).astype(np.int64) if z.ndim == 1 else np.argmax(z, axis=1)]

    @property
    def predict_proba(self):
        """Class probabilities (n, C) in ``classes_`` order; only logistic, softmax and mlp have them."""
        if self.model not in PROBABILISTIC:  # py: models included: they give classes only
            raise AttributeError(f"{self.model} has no probabilities (it is not trained on a likelihood)")
        return self._proba

    def _proba(self, X: Any) -> np.ndarray:
        z = self.decision_function(X)
        if z.ndim == 1:
            p1 = 0.5 * (1.0 + np.tanh(0.5 * z))           # the logistic sigmoid without overflow
            return np.column_stack([1.0 - p1, p1])
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def score(self, X: Any, y: Any) -> float:
        """Mean accuracy on (X, y), y in the original label values."""
        y = np.asarray(y)
        return float(np.mean(self.predict(X) == y)) if y.size else 0.0

    def __repr__(self) -> str:
        return (f"TrainedModel({self.model}, {self.n_features_in_} features, {len(self.classes_)} classes, "
                f"sync {self.config.get('sync', '?')})")
