"""Lazy L2 decay for CSR steps: a step decays only the weights it touches, so a worker's delta
stays as sparse as its rows.

Eager L2 scales every regularised weight by (1 - lr_t*l2) at every step t.  Lazily, a worker
keeps the running product P_t of those factors and, per feature j of the linear layout (its U
weights w[j*U:(j+1)*U] decay together), a stamp: the value of P when j was last caught up.  A
step first catches up the features of its rows, w_j <- w_j * P_now / stamp_j (the decay they
missed: (1 - lr*l2)^k after k steps at a constant rate, the exact product under a schedule),
computes its residuals at those values, multiplies P by this step's factor and catches up again
the features it updates, right before their gradient term: w_j <- (1 - lr_t*l2) w_j - lr_t g_j,
as eager decay does.  ``flush`` applies every pending decay (before a worker's last push), after
which the stored vector equals the eagerly decayed one up to rounding and the state restarts at
1.  A checkpoint part holds the stamps and the product instead of a flush (``saved``/``load``):
a checkpoint then changes nothing in the run, and a resumed worker continues bitwise alike.

P shrinks geometrically; when it falls below RENORM_BELOW every stamp is divided by it and P
restarts at 1 (a pass over the stamps, once every ~345/(lr*l2) steps).  Stamps are capped at
STAMP_MAX: a weight whose missed decay is below 1/STAMP_MAX catches up to (about) zero, as it
would underflow eagerly too.

A model gets lazy decay from ``Model.sgd_step_csr_lazy`` (CSR rows, l2 > 0, a linear layout
whose regularised head is the d*U feature weights); otherwise its CSR step stays eager.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..layout import linear_units

#: the running product is rebased (stamps divided by it, P back to 1) once it falls below this
RENORM_BELOW = 1e-150
#: stamps are capped here after a rebase: a missed decay below 1/STAMP_MAX catches up to ~0
STAMP_MAX = 1e300


@njit(cache=True, fastmath=True, nogil=True, error_model="numpy")
def catch_up(w, stamps, j, P, U):
    """Apply feature j's pending decay P / stamps[j] to its U weights; its stamp becomes P."""
    s = stamps[j]
    if s != P:
        f = P / s
        off = j * U
        for u in range(U):
            w[off + u] *= f
        stamps[j] = P


@njit(cache=True, fastmath=True, nogil=True)
def catch_up_rows(w, indptr, indices, idx, stamps, P, U):
    """Catch up every feature of the CSR rows idx to the running product P."""
    for k in range(idx.shape[0]):
        i = idx[k]
        for p in range(indptr[i], indptr[i + 1]):
            catch_up(w, stamps, indices[p], P, U)


@njit(cache=True, fastmath=True, nogil=True)
def apply_rows(w, g, indptr, indices, idx, lr, l2, stamps, prod, U, head):
    """Lazy form of w[:head] -= lr*(g + l2*w); w[head:] -= lr*g, for a gradient g that is zero
    outside the features of rows idx (and the biases at w[head:]): only those features decay
    (g's feature entries are zeroed as they are applied)."""
    P = prod[0] * (1.0 - lr * l2)
    prod[0] = P
    for k in range(idx.shape[0]):
        i = idx[k]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            catch_up(w, stamps, j, P, U)
            off = j * U
            for u in range(U):
                w[off + u] -= lr * g[off + u]
                g[off + u] = 0.0          # a feature in several rows takes its gradient once
    for j in range(head, w.shape[0]):
        w[j] -= lr * g[j]


@njit(cache=True, fastmath=True, nogil=True)
def _flush(w, stamps, P, U, keys):
    """Catch up every feature to P; write the keys whose weights changed into keys; their count."""
    n = 0
    for j in range(stamps.shape[0]):
        if stamps[j] != P:
            off = j * U
            nonzero = False
            for u in range(U):
                nonzero = nonzero or w[off + u] != 0.0
            catch_up(w, stamps, j, P, U)
            if nonzero:
                for u in range(U):
                    keys[n] = off + u
                    n += 1
    return n


@dataclass
class LazyDecay:
    """A worker's lazy L2 state over one bound CSR shard: per-feature stamps and the running product."""

    data: object            # the BoundModel (CSR rows of a model with sgd_step_csr_lazy)
    units: int              # weights per feature (U)
    stamps: np.ndarray      # float64 (d,): the running product when each feature was last caught up
    prod: np.ndarray        # float64 (1,): the running product now
    rebased: bool = False   # a rebase since the last flush or load: any stamp may differ from 1

    def step(self, w: np.ndarray, idx: np.ndarray, lr: float, l2: float, scratch: np.ndarray) -> None:
        """One minibatch SGD step on rows idx with lazy decay (BoundModel.step's signature)."""
        if lr * l2 >= 1.0:              # a factor <= 0 has no running product: flush, step eagerly
            self.flush(w)
            self.data.step(w, idx, lr, l2, scratch)
            return
        X = self.data.X
        self.data.model.sgd_step_csr_lazy(w, X.indptr, X.indices, X.data, X.shape[1], self.data.y, idx, lr, l2,
                                          self.data.n_classes, scratch, self.stamps, self.prod)
        if self.prod[0] < RENORM_BELOW:
            self.rebase()

    def rebase(self) -> None:
        """Divide every stamp by the running product and restart it at 1 (no weight changes)."""
        np.minimum(self.stamps, STAMP_MAX * self.prod[0], out=self.stamps)
        np.divide(self.stamps, self.prod[0], out=self.stamps)
        self.prod[0] = 1.0
        self.rebased = True

    def saved(self) -> tuple[np.ndarray, float]:
        """The state for a checkpoint: the stamps with 1.0 stored as 0.0 (mostly-zero, so the part
        stores it sparse; no stamp is ever 0), and the running product."""
        return np.where(self.stamps == 1.0, 0.0, self.stamps), float(self.prod[0])

    def load(self, stamps: np.ndarray, prod: float) -> None:
        """Continue from a checkpoint's ``saved()`` state."""
        self.stamps[:] = np.where(stamps == 0.0, 1.0, stamps)
        self.prod[0] = prod
        self.rebased = False

    def pending(self) -> bool:
        """Whether some feature still owes decay."""
        return bool((self.stamps != self.prod[0]).any())

    def flush(self, w: np.ndarray) -> np.ndarray:
        """Apply every pending decay to w and restart the product and stamps at 1; the (sorted)
        keys whose values changed."""
        keys = np.empty(self.stamps.size * self.units, dtype=np.int64)
        n = _flush(w, self.stamps, self.prod[0], self.units, keys)
        self.stamps.fill(1.0)
        self.prod[0] = 1.0
        self.rebased = False
        return keys[:n]


def lazy_decay(data, l2: float) -> LazyDecay | None:
    """The lazy L2 state for a worker's bound shard, or None where steps stay eager: dense rows,
    l2 == 0, a model without ``sgd_step_csr_lazy``, or a head that is not the d*U feature weights."""
    model = data.model
    if not data.sparse or l2 == 0.0 or model.sgd_step_csr_lazy is None:
        return None
    d = data.n_features
    try:
        units = linear_units(int(model.n_params(d, data.n_classes)), d)
    except ValueError:
        return None
    if model.head(d, data.n_classes) != d * units:
        return None
    return LazyDecay(data, units, np.ones(d), np.ones(1))


def owed_decay(w: np.ndarray, saved_stamps: np.ndarray, prod: float) -> np.ndarray:
    """What flushing a checkpointed lazy state (``LazyDecay.saved``) would add to the worker's w."""
    saved_stamps = np.asarray(saved_stamps)
    stamps = np.where(saved_stamps == 0.0, 1.0, saved_stamps)
    head = stamps.size * linear_units(w.size, stamps.size)
    out = np.zeros_like(w)
    out[:head] = w[:head] * np.repeat(prod / stamps, head // stamps.size) - w[:head]
    return out
