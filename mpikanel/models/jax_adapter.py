"""JaxModel: a JAX network trained on the parameter server (``pip install 'mpikanel[jax]'``).

The parameter pytree is flattened once (``jax.flatten_util.ravel_pytree``) into the server's
flat vector layout; each step converts the worker's float64 vector into one reused float32
buffer, runs the jitted ``value_and_grad`` and hands back the gradient as a numpy view of JAX's
output (no further copy). XLA's CPU thread pool is limited by ``--threads`` through XLA_FLAGS,
set before JAX is first imported (``mpikanel.models.spec.limit_threads``).

XLA compiles a jitted function once per input shape. A shard's last batch and the last block of an
evaluation are shorter than the others, so by default (``pad_rows=True``) rows shorter than the
longest seen so far (for training, and apart for evaluation) are padded with zero rows to that
length and the loss is masked to the real rows: a CNN worker compiled its gradient 8 times in a
job (batches of 16, then 4 and 12) where now it compiles it twice per longest length (a full
batch keeps loss_fn as given, which measured faster; a padded one the masked form).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .gradient import GradientModel


class JaxModel(GradientModel):
    """apply_fn(params, X) -> logits, loss_fn(logits, y) -> mean loss; params a pytree of float32 arrays.

    init (optional): (n_features, n_classes, rng) -> a pytree like params, drawn from the run's
    seeded numpy Generator; without it every run starts from params.
    pad_rows: pad short batches and blocks to one length (see the module's doc). It assumes the rows
    are independent: apply_fn maps each row alone (no batch statistics) and loss_fn is the mean of
    per-row losses; pass False for a network where that does not hold."""

    def __init__(self, apply_fn: Callable[[Any, Any], Any], params: Any, loss_fn: Callable[[Any, Any], Any], *,
                 init: Callable[[int, int, np.random.Generator], Any] | None = None, description: str = "",
                 pad_rows: bool = True) -> None:
        import jax
        import jax.numpy as jnp
        from jax.flatten_util import ravel_pytree

        flat, unravel = ravel_pytree(params)
        self.dtype = np.dtype(flat.dtype)
        self.n_params = int(flat.size)
        self._buf = np.empty(self.n_params, dtype=self.dtype)
        self.apply_fn, self.loss_fn, self.unravel = apply_fn, loss_fn, unravel
        self.pad_rows = bool(pad_rows)
        self._longest: dict[str, int] = {}                  # per use: the longest rows padded to
        self._pads: dict[str, tuple[np.ndarray, np.ndarray]] = {}

        def labels(z):
            if z.ndim == 1 or z.shape[-1] == 1:
                return (z.reshape(z.shape[0]) > 0).astype(jnp.int32)
            return jnp.argmax(z, axis=-1).astype(jnp.int32)

        def jitted(masked: bool) -> dict[str, Callable]:
            """The jitted functions over (p, X, y, n): masked, the loss of the first n rows alone."""
            def loss_and_logits(p, X, y, n):
                z = apply_fn(unravel(p), X)
                if not masked:
                    return loss_fn(z, y), z
                per_row = jax.vmap(lambda zi, yi: loss_fn(zi[None], yi[None]))(z, y)
                return jnp.sum(jnp.where(jnp.arange(z.shape[0]) < n, per_row, 0.0)) / n, z

            def mean_loss(p, X, y, n):
                return loss_and_logits(p, X, y, n)[0]

            def both(p, X, y, n):
                value, z = loss_and_logits(p, X, y, n)
                return value, labels(z)

            return {"value_and_grad": jax.jit(jax.value_and_grad(mean_loss)), "grad": jax.jit(jax.grad(mean_loss)),
                    "loss": jax.jit(mean_loss), "both": jax.jit(both)}

        # a full batch takes loss_fn as given (the example CNN's step through the masked per-row form
        # took 22.7 and 24.7 ms against 20.2 and 19.8 ms in one A/B on a noisy machine); a padded one
        # the masked form; evaluation, a forward pass only, the masked form always: one compile per block length
        self._jit = {False: jitted(False), True: jitted(True)}
        self._classes = jax.jit(lambda p, X: labels(apply_fn(unravel(p), X)))
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

    def _padded(self, use: str, X: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None, int]:
        """X and y padded with zero rows to the longest row count `use` has seen (reused buffers),
        and the count of real rows; as given when padding is off or they are the longest."""
        n = int(X.shape[0])
        if not self.pad_rows or n == 0:
            return X, y, n
        size = self._longest[use] = max(self._longest.get(use, 0), n)
        if n == size:
            return X, y, n
        bufs = self._pads.get(use)
        if bufs is None or bufs[0].shape != (size, *X.shape[1:]) or bufs[0].dtype != X.dtype:
            bufs = self._pads[use] = (np.zeros((size, *X.shape[1:]), X.dtype), np.zeros(size, np.int32))
        Xp, yp = bufs
        Xp[:n], Xp[n:] = X, 0
        if y is None:
            return Xp, None, n
        yp[:n], yp[n:] = y, 0
        return Xp, yp.astype(y.dtype, copy=False), n

    def _call(self, name: str, use: str, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        """The jitted `name` on the rows, padded for `use`: masked where padded (always for evaluation)."""
        Xp, yp, n = self._padded(use, X, y)
        masked = self.pad_rows and (use == "eval" or Xp.shape[0] != n)
        return self._jit[masked][name](self._params(w), Xp, yp, n)

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """Mean gradient over the rows (a float32 numpy view of JAX's result) and their mean loss."""
        value, g = self._call("value_and_grad", "train", w, X, y)
        return np.asarray(g), float(value)

    def step_gradient(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean gradient without the loss (what the worker's step uses)."""
        return np.asarray(self._call("grad", "train", w, X, y))

    def loss(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean loss over the rows."""
        return float(self._call("loss", "eval", w, X, y))

    def evaluate(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean loss and class indices in one jitted call (XLA shares the forward pass)."""
        value, classes = self._call("both", "eval", w, X, y)
        return float(value), np.asarray(classes)[:X.shape[0]]

    def predict(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class index per row (argmax of the logits; one logit: > 0)."""
        Xp, _, n = self._padded("eval", X)
        return np.asarray(self._classes(self._params(w), Xp))[:n]

    def params_tree(self, w: np.ndarray) -> Any:
        """The parameter pytree of a flat vector (e.g. the trained model's params)."""
        return self.unravel(self._jnp.asarray(np.asarray(w, dtype=self.dtype)))
