"""JaxModel: a JAX network trained on the parameter server (``pip install 'mpikanel[jax]'``).

The parameter pytree is flattened once (``jax.flatten_util.ravel_pytree``) into the server's
flat vector layout; each step converts the worker's float64 vector into one reused float32
buffer, runs the jitted ``value_and_grad`` and hands back the gradient as a numpy view of JAX's
output (no further copy). XLA's CPU thread pool is limited by ``--threads`` through XLA_FLAGS,
set before JAX is first imported (``mpikanel.models.spec.limit_threads``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .gradient import GradientModel


class JaxModel(GradientModel):
    """apply_fn(params, X) -> logits, loss_fn(logits, y) -> mean loss; params a pytree of float32 arrays.

    init (optional): (n_features, n_classes, rng) -> a pytree like params, drawn from the run's
    seeded numpy Generator; without it every run starts from params."""

    def __init__(self, apply_fn: Callable[[Any, Any], Any], params: Any, loss_fn: Callable[[Any, Any], Any], *,
                 init: Callable[[int, int, np.random.Generator], Any] | None = None, description: str = "") -> None:
        import jax
        import jax.numpy as jnp
        from jax.flatten_util import ravel_pytree

        flat, unravel = ravel_pytree(params)
        self.dtype = np.dtype(flat.dtype)
        self.n_params = int(flat.size)
        self._buf = np.empty(self.n_params, dtype=self.dtype)
        self.apply_fn, self.loss_fn, self.unravel = apply_fn, loss_fn, unravel

        def mean_loss(p, X, y):
            return loss_fn(apply_fn(unravel(p), X), y)

        def classes(p, X):
            z = apply_fn(unravel(p), X)
            if z.ndim == 1 or z.shape[-1] == 1:
                return (z.reshape(z.shape[0]) > 0).astype(jnp.int32)
            return jnp.argmax(z, axis=-1).astype(jnp.int32)

        self._value_and_grad = jax.jit(jax.value_and_grad(mean_loss))
        self._grad = jax.jit(jax.grad(mean_loss))
        self._loss = jax.jit(mean_loss)
        self._classes = jax.jit(classes)
        self._both = jax.jit(lambda p, X, y: (mean_loss(p, X, y), classes(p, X)))
        self._jnp = jnp

        def start(n_features: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
            tree = params if init is None else init(n_features, n_classes, rng)
            w = np.asarray(ravel_pytree(tree)[0], dtype=np.float64)
            if w.size != self.n_params:
                raise ValueError(f"JaxModel: init gave {w.size} parameters, params has {self.n_params}")
            return w

        super().__init__(start, self.grad, self.loss, self.predict,
                         description=description or f"JAX model, {self.n_params:,} parameters")

    def _params(self, w: np.ndarray) -> Any:
        """The flat parameters in JAX's dtype (one conversion into a reused buffer)."""
        np.copyto(self._buf, w, casting="same_kind")
        return self._jnp.asarray(self._buf)

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """Mean gradient over the rows (a float32 numpy view of JAX's result) and their mean loss."""
        value, g = self._value_and_grad(self._params(w), X, y)
        return np.asarray(g), float(value)

    def step_gradient(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean gradient without the loss (what the worker's step uses)."""
        return np.asarray(self._grad(self._params(w), X, y))

    def loss(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean loss over the rows."""
        return float(self._loss(self._params(w), X, y))

    def evaluate(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean loss and class indices in one jitted call (XLA shares the forward pass)."""
        value, classes = self._both(self._params(w), X, y)
        return float(value), np.asarray(classes)

    def predict(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class index per row (argmax of the logits; one logit: > 0)."""
        return np.asarray(self._classes(self._params(w), X))

    def params_tree(self, w: np.ndarray) -> Any:
        """The parameter pytree of a flat vector (e.g. the trained model's params)."""
        return self.unravel(self._jnp.asarray(np.asarray(w, dtype=self.dtype)))
