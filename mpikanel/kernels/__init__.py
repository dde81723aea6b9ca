"""Registry of numba training kernels (models know nothing of MPI).

Built-in models, each with dense and CSR kernels side by side in its own module:
  logistic  binary logistic regression            softmax  multiclass softmax regression
  svm       linear SVM, one-vs-rest hinge         lsq      least squares / ridge, one-vs-rest one-hot
  mlp       one hidden layer (relu|tanh), softmax output; hyper-parameters hidden=, activation=
User models: ``register_model(name, grad, loss_sum, n_params, ...)`` (signatures in custom.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from . import logistic, lsq, mlp, softmax, svm
from ._blocks import preload_cython_blas
from .base import CSR, BoundModel, Model, bind, l2_penalty
from .lazy import LazyDecay, lazy_decay
from .custom import make_model

__all__ = ["CSR", "KERNELS", "BUILTIN", "BoundModel", "LazyDecay", "Model", "bind", "get_model", "kernels_cached",
           "l2_penalty", "lazy_decay", "mark_cached", "register_model", "set_threads", "unregister_model", "warmup"]

BUILTIN: tuple[str, ...] = ("logistic", "softmax", "svm", "lsq", "mlp")
KERNELS: dict[str, Model] = {m.name: m for m in (logistic.MODEL, softmax.MODEL, svm.MODEL, lsq.MODEL, mlp.MODEL)}


def get_model(name: str, **hyper: object) -> Model:
    """The registered model called name, configured with hyper-parameters (hidden=, activation=; None = default)."""
    try:
        model = KERNELS[name]
    except KeyError:
        raise InputError(
            f"unknown model {name!r}; choose from: {', '.join(KERNELS)}"
        ) from None
    return model.with_hyper(**hyper) if hyper else model


def register_model(name: str, grad: Callable, loss_sum: Callable, n_params: Callable[[int, int], int], *,
                   replace: bool = False, **options: object) -> Model:
    """Register a user model from numba kernels; returns its Model. Options: see custom.make_model.

    grad(w, X, y, idx, n_classes, out) adds the mean minibatch gradient into out; loss_sum(w, X, y,
    n_classes) -> float sums the per-row loss; n_params(n_features, n_classes) -> int. Optional:
    predict, n_weights, grad_csr, loss_sum_csr, predict_csr, init, min_classes, max_classes, csr_keys
    (a linear layout whose CSR gradient touches only the rows' features: sparse pushes, lazy L2).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"model name must be an identifier, got {name!r}")
    if name in BUILTIN or (name in KERNELS and not replace):
        raise ValueError(f"model {name!r} is already registered" + ("" if name in BUILTIN else
                                                                    " (pass replace=True)"))
    model = make_model(name, grad, loss_sum, n_params, **options)  # type: ignore[arg-type]
    KERNELS[name] = model
    return model


def unregister_model(name: str) -> None:
    """Remove a user model (built-ins stay)."""
    if name in BUILTIN:
        raise ValueError(f"cannot unregister built-in model {name!r}")
    KERNELS.pop(name, None)


def warmup(model: Model, dense: bool = True, sparse: bool = True, csr: tuple[str, ...] = ("eager", "lazy")) -> None:
    """Compile (or load from the numba cache) the model's dense and CSR kernels for the canonical argument types;
    `csr` names which CSR steps: the eager one (with the loss and the prediction) and/or the lazy-L2 one."""
    if not model.compiled:
        return
    drop_stale_cache()
    preload_cython_blas()
    n_features, n_rows = 3, 4
    n_classes = max(2, model.min_classes)
    X = np.zeros((n_rows, n_features), dtype=np.float32)
    X[:, 0] = 1.0
    y = np.zeros(n_rows, dtype=np.int32)
    idx = np.arange(n_rows, dtype=np.int64)
    w = np.zeros(model.n_params(n_features, n_classes), dtype=np.float64)
    if dense:
        bound = bind(model, X, y, n_classes)
        bound.step(w, idx, 0.0, 0.0, bound.scratch())
        bound.loss_sum(w)
        bound.correct(w)
    if sparse and model.supports_csr:
        bound = bind(model, CSR.from_dense(X), y, n_classes)
        if "eager" in csr:
            bound.step(w, idx, 0.0, 1e-4, bound.scratch())
            bound.loss_sum(w)
            bound.correct(w)
        lazy = lazy_decay(bound, 1e-4) if "lazy" in csr else None
        if lazy is not None:
            lazy.step(w, idx, 0.0, 1e-4, bound.scratch())
            lazy.flush(w)


def _cache_dir() -> Path | None:
    """numba's cache directory of this package's kernels (None when numba does not cache them)."""
    from ._linear import dense_loss
    try:
        return Path(dense_loss._cache._cache_path)
    except AttributeError:
        return None


#: In numba's cache directory of the kernels: the sources' stamps its entries were compiled from.
SOURCES_FILE = "mpikanel-sources"


def _source_stamps() -> list[tuple[str, int, int]]:
    """(name, mtime in ns, size) of every kernel source file: what numba stamps a cached entry with."""
    return [(p.name, st.st_mtime_ns, st.st_size)
            for p in sorted(Path(__file__).parent.glob("*.py")) for st in (p.stat(),)]


def drop_stale_cache() -> bool:
    """Empty numba's cache of the kernels when any kernel source changed since it was filled; True if it did.

    numba checks a cached entry against its own source file only, and the kernels inline helpers
    from the other files (``_blocks``, ``_intrinsics``, ``lazy``): after an edit of a helper alone,
    numba would load entries compiled from the old helper.  Called before the kernels load
    (``warmup``), on the rank that fills the cache first."""
    where = _cache_dir()
    if where is None:
        return False
    stamp = repr(_source_stamps())
    marker = where / SOURCES_FILE
    try:
        recorded = marker.read_text()
    except OSError:     # nothing recorded yet: entries there come from this code (tests, benches) or from
        recorded = None  # a release without the record, and are trusted as numba trusts them
    if recorded == stamp:
        return False
    stale = [] if recorded is None else [p for pattern in ("*.nbi", "*.nbc", "mpikanel-warm-*")
                                         for p in where.glob(pattern)]
    try:
        for p in stale:
            p.unlink(missing_ok=True)
        where.mkdir(parents=True, exist_ok=True)
        marker.write_text(stamp)
    except OSError:     # a read-only cache: numba cannot write there either
        return False
    return bool(stale)


def cache_is_cold() -> bool:
    """Whether numba's cache holds no compiled kernel yet: the first run compiles them (~20 s)."""
    where = _cache_dir()
    return where is not None and not any(where.glob("*.nbc"))


def _warm_marker(model: Model, dense: bool, sparse: bool) -> Path | None:
    """The file that says warmup(model, dense, sparse) filled this numba cache: its name hashes what
    numba keys a cached kernel by (the kernels' source files' mtime and size, numba, Python, the
    CPU) and which dense products they were compiled with (BLAS where SciPy is installed, loops
    otherwise), so any change that makes numba compile again names another file: two environments
    can share one cache. None for user models (their kernels' sources are the user's) and where
    numba does not cache."""
    where = _cache_dir()
    if where is None or not model.compiled or model.name not in BUILTIN:
        return None
    import hashlib

    import numba
    from llvmlite import binding as llvm

    from ._blocks import HAVE_BLAS

    key = repr((model.name, model.description, dense, sparse and model.supports_csr, HAVE_BLAS, numba.__version__,
                sys.version, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), _source_stamps()))
    return where / f"mpikanel-warm-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def kernels_cached(model: Model, dense: bool = True, sparse: bool = True) -> bool:
    """Whether warmup(model, dense, sparse) would only load from numba's cache (mark_cached recorded it)."""
    marker = _warm_marker(model, dense, sparse)
    return marker is not None and marker.exists()


def mark_cached(model: Model, dense: bool = True, sparse: bool = True) -> None:
    """Record that warmup(model, dense, sparse) has just filled numba's cache (nothing if it cannot)."""
    marker = _warm_marker(model, dense, sparse)
    if marker is not None:
        try:
            marker.touch()
        except OSError:     # a read-only cache: every run then loads on rank 0 first, as before markers
            pass


def set_threads(n: int) -> dict[str, object]:
    """Set this process's numba and BLAS thread counts to n (1 = single-threaded); returns what is in effect.

    numba: ``numba.set_num_threads(min(n, NUMBA_NUM_THREADS))`` -- numba's pool size is fixed when
    numba starts (``mpikanel.comm.environment`` defaults NUMBA_NUM_THREADS to 1), so a larger n
    needs NUMBA_NUM_THREADS >= n in the environment first.  BLAS/OpenMP pools: threadpoolctl's
    ``threadpool_limits(n)`` when threadpoolctl is installed (scikit-learn brings it).  The
    built-in kernels are serial loops either way (ranks are the parallelism); threads only reach
    code that uses numba's parallel loops or BLAS.  Returned keys: ``numba`` (threads now in
    effect), ``numba_max``, ``blas`` (smallest limit over the loaded BLAS/OpenMP pools, None if
    threadpoolctl is absent or none is loaded) and ``requested``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    import numba

    numba_max = int(numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(min(n, numba_max))
    blas: int | None = None
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        pass
    else:
        threadpool_limits(n)
        counts = [int(p["num_threads"]) for p in threadpool_info()]
        blas = min(counts) if counts else None
    return {"requested": n, "numba": int(numba.get_num_threads()), "numba_max": numba_max, "blas": blas}
