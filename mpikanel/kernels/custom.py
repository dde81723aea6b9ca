"""User-defined models: a numba-compiled gradient (and loss) wrapped into the library's SGD steps.

Signatures the user supplies (compile them with ``@numba.njit``; arguments as in base.py):

  grad(w, X, y, idx, n_classes, out) -> None
      Add the MEAN over the minibatch rows X[idx] of the per-row loss gradient (no L2 term)
      into out (float64, len(w)); the library zeroes out before each call.
  loss_sum(w, X, y, n_classes) -> float
      Sum over all rows of X of the per-row loss (no L2 term).
  predict(w, X, n_classes) -> int32 array            (optional)
      Class per row; default for a linear layout: C*(d+1) -> argmax of C scores,
      d+1 -> 1 where w.x + b > 0.
  CSR variants (optional, needed for libsvm data): the same with X replaced by
      indptr, indices, data, d:  grad_csr(w, indptr, indices, data, d, y, idx, n_classes, out),
      loss_sum_csr(w, indptr, indices, data, d, y, n_classes), predict_csr(w, indptr, indices, data, d, n_classes).

The library's step is  w[:k] -= lr * (out[:k] + l2 * w[:k]);  w[k:] -= lr * out[k:]  with
k = n_weights(d, C) (default: all parameters regularised).

``csr_keys=True`` promises a linear layout (W^T as (d, U) at w[:d*U], U biases after, n_weights =
d*U) and a grad_csr that is zero outside the weight rows of the minibatch rows' columns and the
biases. Workers then push only the keys their steps change and apply L2 lazily (lazy.py: only the
features a step updates decay, each caught up on the decay it missed). Without it the CSR step
decays every weight eagerly, and every push carries every nonzero weight.

numba's on-disk cache keys a function on its source file, not on the module name it was loaded
under, and a cached function records that name; the same user file run as ``__main__``, loaded
with runpy, or imported as a module would then load a cache entry naming a module the process
does not have (``ModuleNotFoundError``).  So the library calls its own copy of every user kernel,
compiled from the user's Python source without on-disk caching (same numba options otherwise);
each process compiles the user's kernels once (about a second each), whatever the user's ``cache=``.
Helpers the user kernels call keep their own decorators: give those ``cache=False`` too.
"""

from __future__ import annotations

from typing import Callable

from numba import njit
from numba.core.dispatcher import Dispatcher

from ..layout import linear_units
from . import _linear
from .base import Model, _zeros_init
from .lazy import apply_rows, catch_up_rows


@njit(cache=True, fastmath=True, nogil=True)
def sgd_update(w, g, lr, l2, k):
    """One pass of w[:k] -= lr*(g[:k] + l2*w[:k]); w[k:] -= lr*g[k:] (g float32 or float64)."""
    for j in range(k):
        w[j] -= lr * (g[j] + l2 * w[j])
    for j in range(k, w.shape[0]):
        w[j] -= lr * g[j]


class _Sized:
    """Helper holding how many leading parameters are regularised."""

    def __init__(self, n_params: Callable[[int, int], int], n_weights: Callable[[int, int], int] | None) -> None:
        self.n_params = n_params
        self.n_weights = n_weights

    def head(self, d: int, C: int) -> int:
        """Regularised head length."""
        return int(self.n_params(d, C) if self.n_weights is None else self.n_weights(d, C))


class _DenseStep(_Sized):
    """sgd_step(w, X, y, idx, lr, l2, C, scratch) from a user grad."""

    def __init__(self, grad: Callable, n_params: Callable, n_weights: Callable | None) -> None:
        super().__init__(n_params, n_weights)
        self.grad = grad

    def __call__(self, w, X, y, idx, lr, l2, n_classes, scratch) -> None:
        if idx.shape[0] == 0:
            return
        g = scratch[: w.shape[0]]
        g[:] = 0.0
        self.grad(w, X, y, idx, n_classes, g)
        sgd_update(w, g, lr, l2, self.head(X.shape[1], n_classes))


class _CsrStep(_Sized):
    """sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, C, scratch) from a user grad_csr."""

    def __init__(self, grad: Callable, n_params: Callable, n_weights: Callable | None) -> None:
        super().__init__(n_params, n_weights)
        self.grad = grad

    def __call__(self, w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch) -> None:
        if idx.shape[0] == 0:
            return
        g = scratch[: w.shape[0]]
        g[:] = 0.0
        self.grad(w, indptr, indices, data, d, y, idx, n_classes, g)
        sgd_update(w, g, lr, l2, self.head(d, n_classes))


class _CsrLazyStep(_Sized):
    """sgd_step_csr_lazy(..., scratch, stamps, prod) from a user grad_csr whose gradient is zero outside
    the features of the minibatch's rows and the biases (csr_keys): only those features decay."""

    def __init__(self, grad: Callable, n_params: Callable, n_weights: Callable | None) -> None:
        super().__init__(n_params, n_weights)
        self.grad = grad

    def __call__(self, w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, stamps, prod) -> None:
        if idx.shape[0] == 0:
            return
        head = self.head(d, n_classes)
        units = head // d
        catch_up_rows(w, indptr, indices, idx, stamps, prod[0], units)
        g = scratch[: w.shape[0]]
        g[:] = 0.0
        self.grad(w, indptr, indices, data, d, y, idx, n_classes, g)
        apply_rows(w, g, indptr, indices, idx, lr, l2, stamps, prod, units, head)


def uncached(f: Callable | None) -> Callable | None:
    """A copy of a numba dispatcher compiled from its Python source without on-disk caching (other callables as is)."""
    if not isinstance(f, Dispatcher):
        return f
    options = {k: v for k, v in f.targetoptions.items() if k not in ("cache", "nopython")}
    return njit(**options)(f.py_func)


def _linear_kind(w_len: int, d: int, C: int) -> int:
    try:
        units = linear_units(w_len, d)
    except ValueError:
        units = 0
    if units == 1:
        return _linear.LOGISTIC
    if units == C:
        return _linear.SOFTMAX
    raise ValueError("custom model: no predict given and the parameters are not a linear layout "
                     f"(len(w)={w_len}, d={d}, C={C}); pass predict= to register_model")


def default_predict(w, X, n_classes):
    """Argmax of linear scores for a linear layout."""
    return _linear.dense_predict(w, X, n_classes, _linear_kind(w.shape[0], X.shape[1], n_classes))


def default_predict_csr(w, indptr, indices, data, d, n_classes):
    """Argmax of linear scores for a linear layout (CSR rows)."""
    return _linear.csr_predict(w, indptr, indices, data, d, n_classes, _linear_kind(w.shape[0], d, n_classes))


def make_model(name: str, grad: Callable, loss_sum: Callable, n_params: Callable[[int, int], int], *,
               predict: Callable | None = None, n_weights: Callable[[int, int], int] | None = None,
               grad_csr: Callable | None = None, loss_sum_csr: Callable | None = None,
               predict_csr: Callable | None = None, init: Callable | None = None,
               min_classes: int = 2, max_classes: int | None = None, description: str = "",
               csr_keys: bool = False) -> Model:
    """Build a Model from user kernels (see the module docstring for the signatures)."""
    for what, f in (("grad", grad), ("loss_sum", loss_sum), ("n_params", n_params)):
        if not callable(f):
            raise TypeError(f"register_model: {what} must be callable")
    if (grad_csr is None) != (loss_sum_csr is None):
        raise TypeError("register_model: give both grad_csr and loss_sum_csr, or neither")
    csr = grad_csr is not None
    grad, loss_sum, predict, grad_csr, loss_sum_csr, predict_csr = (
        uncached(f) for f in (grad, loss_sum, predict, grad_csr, loss_sum_csr, predict_csr))
    return Model(
        name=name,
        min_classes=min_classes,
        max_classes=max_classes,
        n_params=n_params,
        scratch_size=n_params,
        sgd_step=_DenseStep(grad, n_params, n_weights),
        loss_sum=loss_sum,
        predict=predict or default_predict,
        n_weights=n_weights or n_params,
        sgd_step_csr=_CsrStep(grad_csr, n_params, n_weights) if csr else None,
        sgd_step_csr_lazy=_CsrLazyStep(grad_csr, n_params, n_weights) if csr and csr_keys else None,
        csr_keys=csr and csr_keys,
        loss_sum_csr=loss_sum_csr,
        predict_csr=(predict_csr or default_predict_csr) if csr else None,
        init=init or _zeros_init,
        description=description or f"user-defined model {name}",
    )
