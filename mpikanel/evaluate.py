"""The loss-vs-time curve after a run: every snapshot's loss and accuracy on a set of rows, with BLAS.

The kernels evaluate one parameter vector at a time, row by row (about 0.1 s per pass over 10k
rows x 1000 features here); the curve needs two passes (loss, accuracy) per snapshot and set, which
took 15 s of rank 0's time after a 3 s run. For the built-in models on dense rows the scores of
many snapshots are one float32 matrix product (X @ [W_1 ... W_m]), and losses and hits follow from
the scores in numpy with the kernels' own definitions (``mpikanel/kernels/_linear.py``,
``mlp.py``): mean loss without the L2 term, prediction = argmax (logistic: score > 0). Scores are
float32 products, so a curve point can differ from the kernels' float64 figure by ~1e-6
(relative); the run's final figures still come from the kernels. Other models and CSR rows
return None (the caller evaluates with the kernels).
"""
from __future__ import annotations

import numpy as np

from .layout import LINEAR_MODELS, linear_views, mlp_views, units_of

BLOCK = 16          # snapshots per matrix product (bounds the n x units x BLOCK score block)
def curve_of(snapshots: list, rows_by_prefix: dict, hidden: int = 64, activation: str = "relu",
             python_points: int = 8) -> dict:
    """The loss-vs-time curve: time_s, version and, per prefix ("test", "val") with rows, PREFIX_loss
    and PREFIX_accuracy of every snapshot (BLAS where supported, else the kernels); a py: model's
    snapshots are thinned to `python_points`, as each point is a forward pass of the network."""
    from .metrics import evaluate_curve

    snaps = list(snapshots)
    if any(rows is not None and not rows.model.compiled for rows in rows_by_prefix.values()):
        snaps = thin(snaps, python_points)
    curve = evaluate_curve(snaps, lambda p: 0.0, None)
    for prefix, rows in rows_by_prefix.items():
        if rows is None or not rows.rows:
            continue
        fast = snapshot_metrics(rows.model.name, rows.X, rows.y, rows.n_classes, [x.params for x in snaps],
                                hidden, activation)
        if fast is None:                # other models, CSR rows: the kernels, one snapshot at a time
            part = evaluate_curve(snaps, lambda p, d=rows: d.loss_sum(p) / d.rows,
                                  lambda p, d=rows: d.correct(p) / d.rows, prefix=prefix)
        else:
            part = evaluate_curve(snaps, lambda p: 0.0, None, prefix=prefix)
            part[f"{prefix}_loss"], part[f"{prefix}_accuracy"] = fast
        curve.update(part)
    return curve


def thin(snaps: list, most: int) -> list:
    """At most `most` snapshots, evenly spread, the first and the last kept."""
    if len(snaps) <= most:
        return snaps
    keep = np.unique(np.round(np.linspace(0, len(snaps) - 1, most)).astype(np.int64))
    return [snaps[i] for i in keep]


def snapshot_metrics(model: str, X, y: np.ndarray, n_classes: int, params: list[np.ndarray],
                     hidden: int = 64, activation: str = "relu") -> tuple[np.ndarray, np.ndarray] | None:
    """(mean loss, accuracy) of each parameter vector in `params` on rows (X, y); None if unsupported."""
    if not isinstance(X, np.ndarray) or X.ndim != 2 or (model not in LINEAR_MODELS and model != "mlp"):
        return None
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    n, d = X.shape
    if n == 0 or not params:
        return None
    losses, accs = np.empty(len(params)), np.empty(len(params))
    for b0 in range(0, len(params), BLOCK):
        block = params[b0:b0 + BLOCK]
        if model == "mlp":
            out = _mlp_scores(X, block, d, n_classes, hidden, activation)
        else:
            out = _linear_scores(X, block, d, units_of(model, n_classes))
        for j, z in enumerate(out):
            losses[b0 + j], accs[b0 + j] = _loss(model, z, y), _hits(model, z, y) / n
    return losses, accs


def _linear_scores(X: np.ndarray, block: list[np.ndarray], d: int, U: int) -> list[np.ndarray]:
    """Scores (n x U, float64) of each linear parameter vector."""
    views = [linear_views(p, d, U) for p in block]
    W = np.concatenate([np.asarray(Wp, dtype=np.float32) for Wp, _ in views], axis=1)
    Z = X @ W
    return [Z[:, j * U:(j + 1) * U].astype(np.float64) + np.asarray(b) for j, (_, b) in enumerate(views)]


def _mlp_scores(X: np.ndarray, block: list[np.ndarray], d: int, C: int, H: int, activation: str) -> list[np.ndarray]:
    """Output scores of each MLP parameter vector."""
    views = [mlp_views(p, d, C) for p in block]
    W1 = np.concatenate([np.asarray(W1p, dtype=np.float32) for W1p, _, _, _ in views], axis=1)
    A = X @ W1
    out = []
    for j, (_, W2, b1, b2) in enumerate(views):
        h = A[:, j * H:(j + 1) * H].astype(np.float64) + b1
        h = np.maximum(h, 0.0) if activation == "relu" else np.tanh(h)
        out.append(h @ W2.T + b2)
    return out


def _loss(model: str, z: np.ndarray, y: np.ndarray) -> float:
    """Mean per-row loss from the scores, as the kernels define it."""
    rows = np.arange(y.size)
    if model == "logistic":
        return float(np.mean(np.logaddexp(0.0, -(2.0 * y - 1.0) * z[:, 0])))
    if model in ("softmax", "mlp"):
        zmax = z.max(axis=1)
        return float(np.mean(zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1)) - z[rows, y]))
    target = np.zeros_like(z)
    target[rows, y] = 1.0
    if model == "svm":                                  # one-vs-rest hinge, t = +1 for the class, -1 else
        return float(np.mean(np.maximum(0.0, 1.0 - (2.0 * target - 1.0) * z).sum(axis=1)))
    return float(np.mean(0.5 * ((z - target) ** 2).sum(axis=1)))       # lsq: one-vs-rest squares


def _hits(model: str, z: np.ndarray, y: np.ndarray) -> int:
    """Rows predicted right: argmax of the scores (logistic: score > 0 is class 1)."""
    pred = (z[:, 0] > 0).astype(np.int64) if model == "logistic" else np.argmax(z, axis=1)
    return int((pred == y).sum())
