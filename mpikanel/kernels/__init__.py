"""Registry of numba training kernels (models know nothing of MPI).

Each model lives in its own module (logistic.py, softmax.py, ...) exposing a MODEL record;
add new ones (svm, lsq, mlp, CSR variants) by importing their MODEL into KERNELS below.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import logistic, softmax
from .base import BoundModel, Model, bind, l2_penalty

__all__ = ["KERNELS", "BoundModel", "Model", "bind", "get_model", "l2_penalty", "warmup"]

KERNELS: dict[str, Model] = {m.name: m for m in (logistic.MODEL, softmax.MODEL)}


def get_model(name: str) -> Model:
    """Return the registered model called name, or raise InputError listing the choices."""
    try:
        return KERNELS[name]
    except KeyError:
        raise InputError(
            f"unknown model {name!r}; choose from: {', '.join(KERNELS)}"
        ) from None


def warmup(model: Model) -> None:
    """Compile (or load from the numba cache) the model's kernels for the canonical argument types."""
    n_features, n_rows = 3, 4
    n_classes = model.min_classes
    X = np.zeros((n_rows, n_features), dtype=np.float32)
    y = np.zeros(n_rows, dtype=np.int32)
    idx = np.arange(n_rows, dtype=np.int64)
    w = np.zeros(model.n_params(n_features, n_classes), dtype=np.float64)
    scratch = np.zeros(model.scratch_size(n_features, n_classes), dtype=np.float64)
    model.sgd_step(w, X, y, idx, 0.0, 0.0, int(n_classes), scratch)
    model.loss_sum(w, X, y, int(n_classes))
    model.predict(w, X, int(n_classes))
