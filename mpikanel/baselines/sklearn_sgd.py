"""Single-process scikit-learn SGD on the same data: ``python -m mpikanel.baselines.sklearn_sgd [train flags]``.

``SGDClassifier(loss="log_loss", alpha=--l2, learning_rate="constant", eta0=--lr)`` trained
with ``partial_fit`` over chunks of the training rows (``--chunks-per-epoch``, chunk order
reshuffled every epoch) for ``--epochs`` passes. After each chunk the clock is paused and the
test log loss and accuracy are recorded, so the curve's time axis is training time only.
scikit-learn updates per *sample* (not per minibatch), so its learning rates are not on the
minibatch models' scale: ``--eta0 X`` overrides eta0 (``bench sync`` passes lr/batch_size, the
per-sample rate that takes one minibatch's worth of samples as far as one mean-gradient step).
``--max-train-s S`` stops after the chunk that passes S seconds of training time (the curve and
the final metrics are then those at the cut). Multiclass is one-vs-rest. Heterogeneity flags do not apply (one
process) and are ignored, as are --sync and --staleness. Exit code 3 with a note if
scikit-learn is not installed.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ..config import TrainConfig, config_from_args
from ..data import describe, load_rows, load_test
from ..errors import InputError
from ..data import data_spec
from .common import finish, make_summary

MISSING_EXIT = 3


def _split_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """Take --chunks-per-epoch and --eta0 off the command line; the rest are mpikanel.train flags."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--chunks-per-epoch", type=int, default=10)
    p.add_argument("--eta0", type=float, default=None)
    p.add_argument("--max-train-s", type=float, default=None)
    ns, rest = p.parse_known_args(argv)
    if ns.chunks_per_epoch < 1:
        raise InputError(f"--chunks-per-epoch must be >= 1, got {ns.chunks_per_epoch}")
    if ns.eta0 is not None and not ns.eta0 > 0:
        raise InputError(f"--eta0 must be > 0, got {ns.eta0}")
    return ns, rest


def _log_loss(clf, X: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy of predict_proba (the kernels' test loss, no L2 term)."""
    proba = clf.predict_proba(X)
    picked = proba[np.arange(len(y)), np.searchsorted(clf.classes_, y)]
    return float(-np.mean(np.log(np.clip(picked, 1e-15, 1.0))))


def train(config: TrainConfig, chunks_per_epoch: int, eta0: float | None = None,
          max_train_s: float | None = None) -> dict:
    """Fit chunk by chunk, recording the test curve; returns the summary."""
    from sklearn.linear_model import SGDClassifier

    spec = data_spec(config)
    info = describe(spec)
    data, test = load_rows(spec, info, 0, info.n_rows), load_test(spec, info)
    classes = np.arange(info.n_classes)
    clf = SGDClassifier(loss="log_loss", alpha=config.l2, learning_rate="constant",
                        eta0=config.lr if eta0 is None else eta0,
                        random_state=config.seed)
    rng = np.random.default_rng([config.seed, 0])
    bounds = np.linspace(0, info.n_rows, min(chunks_per_epoch, info.n_rows) + 1).astype(int)
    curve = {k: [] for k in ("time_s", "version", "test_loss", "test_accuracy")}
    train_s, chunks = 0.0, 0
    order = (c for _ in range(config.epochs) for c in rng.permutation(len(bounds) - 1))
    for c in order:
        if max_train_s is not None and train_s >= max_train_s:
            break
        t0 = time.perf_counter()
        clf.partial_fit(data.X[bounds[c]:bounds[c + 1]], data.y[bounds[c]:bounds[c + 1]], classes=classes)
        train_s += time.perf_counter() - t0
        chunks += 1
        for key, value in (("time_s", train_s), ("version", chunks), ("test_loss", _log_loss(clf, test.X, test.y)),
                           ("test_accuracy", float(clf.score(test.X, test.y)))):
            curve[key].append(value)
    curve = {k: np.asarray(v) for k, v in curve.items()}
    worker = {"rank": 1, "rows": info.n_rows, "steps": chunks, "pushes": 0, "compute_s": train_s,
              "comm_s": 0.0, "wait_s": 0.0, "injected_s": 0.0}
    summary = make_summary("sklearn", config, "sgdclassifier-log_loss", 1, [worker], train_s, {
        "data": info.description, "n_train": info.n_rows, "n_test": test.X.shape[0],
        "train_loss": _log_loss(clf, data.X, data.y), "train_accuracy": float(clf.score(data.X, data.y)),
        "test_loss": float(curve["test_loss"][-1]), "test_accuracy": float(curve["test_accuracy"][-1]),
        "chunks_per_epoch": len(bounds) - 1, "eta0": clf.eta0,
        "epochs_done": chunks / (len(bounds) - 1),
        "cut_at_s": max_train_s if chunks < config.epochs * (len(bounds) - 1) else None})
    import sklearn
    summary["versions"]["sklearn"] = sklearn.__version__
    finish(config, summary, curve)
    return summary


def main(argv: list[str] | None = None) -> int:
    """CLI: 0 on success, 2 on bad input, 3 if scikit-learn is missing."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("sklearn_sgd: skipped: scikit-learn is not installed (pip install scikit-learn, "
              "or the project's [bench] extra)", file=sys.stderr)
        return MISSING_EXIT
    try:
        extra, rest = _split_args(argv)
        train(config_from_args(rest), extra.chunks_per_epoch, extra.eta0, extra.max_train_s)
    except InputError as exc:
        print(f"sklearn_sgd: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
