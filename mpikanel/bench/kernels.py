"""``bench kernels``: one SGD epoch per model on dense and CSR data vs memory bandwidth and scikit-learn.

For every model and data kind it times one shuffled epoch of minibatch steps (the kernels alone,
driven from a numba loop, and the same through ``BoundModel.step`` from Python as the worker loop
calls it), reports samples/s, GB/s of data touched (feature bytes + label + row index, CSR:
indices + values + indptr), that rate as a fraction of the single-core streaming-read bandwidth
measured in the same run, and the speedup over scikit-learn doing one epoch of the same model in
the same run (SGDClassifier with the matching loss; MLPClassifier(solver="sgd") for mlp), given
float64 inputs (its native dtype; the conversion is not timed). Single thread throughout.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import numpy as np
from numba import njit

SKLEARN_LOSS = {"logistic": "log_loss", "softmax": "log_loss", "svm": "hinge", "lsq": "squared_error"}
MODELS = ("logistic", "softmax", "svm", "lsq", "mlp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the kernel benchmark."""
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--kinds", nargs="+", default=["dense", "csr"], choices=["dense", "csr"])
    parser.add_argument("--dense-rows", type=int, default=200_000)
    parser.add_argument("--dense-features", type=int, default=100)
    parser.add_argument("--csr-rows", type=int, default=1_000_000)
    parser.add_argument("--csr-features", type=int, default=100_000)
    parser.add_argument("--csr-nnz", type=int, default=50, help="nonzeros per CSR row")
    parser.add_argument("--classes", type=int, default=10, help="classes of the multiclass models")
    parser.add_argument("--hidden", type=int, default=64, help="mlp hidden units")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--l2", type=float, default=1e-4, help="L2 of the dense runs")
    parser.add_argument("--csr-l2", type=float, default=0.0,
                        help="L2 of the CSR runs (l2 > 0 decays every weight each step: O(n_params))")
    parser.add_argument("--sklearn-max-rows", type=int, default=200_000,
                        help="sklearn runs on at most this many rows (rate per sample compared)")
    parser.add_argument("--sklearn-mlp-max-rows", type=int, default=20_000,
                        help="row cap of sklearn's MLPClassifier on CSR data (~1e3 rows/s there)")
    parser.add_argument("--no-sklearn", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="timed epochs per case (best reported)")
    parser.add_argument("--json", metavar="PATH", help="write the results to PATH")


# ---------------------------------------------------------------- bandwidth


@njit(cache=True, fastmath=True, nogil=True)
def _stream_sum(a):
    """Streaming read of a float32 array (sum in 8 lanes so it vectorises)."""
    acc = np.zeros(8, dtype=np.float32)
    n8 = a.shape[0] // 8 * 8
    for i in range(0, n8, 8):
        for k in range(8):
            acc[k] += a[i + k]
    return acc.sum()


def stream_bandwidth(n_bytes: int = 1 << 30, repeats: int = 5) -> float:
    """Single-core streaming-read bandwidth in GB/s (best of repeats over an n_bytes float32 array)."""
    a = np.ones(n_bytes // 4, dtype=np.float32)
    _stream_sum(a[:1024])
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        _stream_sum(a)
        best = max(best, a.nbytes / (time.perf_counter() - t) / 1e9)
    return best


# ---------------------------------------------------------------- data


def dense_data(rows: int, d: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features, labels from a noisy linear teacher."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, d), dtype=np.float32)
    teacher = rng.standard_normal((d, classes)).astype(np.float32) * np.float32(3.0 / np.sqrt(d))
    y = np.argmax(X @ teacher + rng.gumbel(size=(rows, classes)).astype(np.float32), axis=1).astype(np.int32)
    return X, y


def csr_data(rows: int, d: int, nnz: int, classes: int, seed: int = 0):
    """CSR rows with exactly nnz distinct-ish random columns each (sorted), values U(0.05, 1.05)."""
    from ..kernels import CSR

    rng = np.random.default_rng(seed)
    indices = np.sort(rng.integers(0, d, (rows, nnz), dtype=np.int32), axis=1).ravel()
    data = (rng.random(rows * nnz, dtype=np.float32) + np.float32(0.05))
    indptr = np.arange(0, rows * nnz + 1, nnz, dtype=np.int64)
    teacher = rng.standard_normal((d, classes)).astype(np.float32) * np.float32(3.0 / np.sqrt(nnz))
    scores = np.add.reduceat(data[:, None] * teacher[indices], indptr[:-1], axis=0)
    y = np.argmax(scores + rng.gumbel(size=(rows, classes)).astype(np.float32), axis=1).astype(np.int32)
    return CSR(indptr, indices, data, (rows, d)), y


# ---------------------------------------------------------------- our epoch


@njit(nogil=True)
def _epoch_dense(step, w, X, y, order, batch, lr, l2, C, scratch, extra):
    """All minibatch steps of one epoch, driven from numba (extra: kind / activation)."""
    n = order.shape[0]
    for k in range(0, n, batch):
        step(w, X, y, order[k:min(k + batch, n)], lr, l2, C, scratch, extra)


@njit(nogil=True)
def _epoch_csr(step, w, indptr, indices, data, d, y, order, batch, lr, l2, C, scratch, extra):
    """All minibatch steps of one CSR epoch, driven from numba."""
    n = order.shape[0]
    for k in range(0, n, batch):
        step(w, indptr, indices, data, d, y, order[k:min(k + batch, n)], lr, l2, C, scratch, extra)


def _kernel_and_extra(name: str, activation: str, csr: bool):
    """The raw numba step of a built-in model and its trailing int argument."""
    from ..kernels import _linear, mlp

    if name == "mlp":
        return (mlp.csr_step if csr else mlp.dense_step), mlp.ACTIVATIONS[activation]
    kind = {"logistic": _linear.LOGISTIC, "softmax": _linear.SOFTMAX, "svm": _linear.HINGE,
            "lsq": _linear.SQUARED}[name]
    return (_linear.csr_step if csr else _linear.dense_step), kind


def time_ours(name: str, X, y, C: int, args: argparse.Namespace, l2: float) -> dict:
    """Best-of-repeats epoch time through the numba driver and through BoundModel.step."""
    from ..kernels import CSR, bind, get_model

    model = get_model(name, hidden=args.hidden, activation="relu")
    csr = isinstance(X, CSR)
    d = X.shape[1]
    n = X.shape[0]
    bound = bind(model, X, y, C)
    w0 = model.init(model.n_params(d, C), d, C, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    lr = 0.01 if name == "lsq" else 0.05
    step, extra = _kernel_and_extra(name, "relu", csr)
    if not csr and name == "logistic":
        step, extra = _LOG_DENSE, 0   # the hand-written dense logistic kernel
    warm = np.arange(min(n, 2 * args.batch_size), dtype=np.int64)  # compile the drivers outside the timing
    if csr:
        _epoch_csr(step, w0.copy(), X.indptr, X.indices, X.data, d, y, warm, args.batch_size, lr, l2, C,
                   bound.scratch(), extra)
    else:
        _epoch_dense(step, w0.copy(), X, y, warm, args.batch_size, lr, l2, C, bound.scratch(), extra)
    kernel_s, loop_s = [], []
    for rep in range(args.repeats):
        order = rng.permutation(n).astype(np.int64)
        w, scratch = w0.copy(), bound.scratch()
        t = time.perf_counter()
        if csr:
            _epoch_csr(step, w, X.indptr, X.indices, X.data, d, y, order, args.batch_size, lr, l2, C, scratch, extra)
        else:
            _epoch_dense(step, w, X, y, order, args.batch_size, lr, l2, C, scratch, extra)
        kernel_s.append(time.perf_counter() - t)
        if not np.all(np.isfinite(w)):
            raise RuntimeError(f"{name}: non-finite parameters after one epoch")
        if rep:
            continue   # the Python-driven loop is timed once
        w = w0.copy()
        t = time.perf_counter()
        b = args.batch_size
        for k in range(0, n, b):
            bound.step(w, order[k:k + b], lr, l2, scratch)
        loop_s.append(time.perf_counter() - t)
    acc = bound.correct(w) / n if n <= 200_000 else bind(model, _head(X, 200_000), y[:200_000], C).correct(w) / 200_000
    return {"kernel_s": min(kernel_s), "loop_s": min(loop_s), "train_accuracy": acc}


def _head(X, rows: int):
    return X.rows(0, rows) if hasattr(X, "rows") and not isinstance(X, np.ndarray) else X[:rows]


def _make_wrapper():
    from ..kernels import logistic

    lg = logistic.sgd_step

    @njit(nogil=True)
    def log_dense(w, X, y, idx, lr, l2, C, scratch, extra):
        lg(w, X, y, idx, lr, l2, C, scratch)

    return log_dense


_LOG_DENSE = _make_wrapper()


def bytes_touched(X, n_samples: int) -> float:
    """Bytes of data one epoch reads: features + int32 label + int64 row index per sample."""
    from ..kernels import CSR

    if isinstance(X, CSR):
        return X.nnz / X.shape[0] * n_samples * 8 + n_samples * (16 + 4 + 8)
    return n_samples * (X.shape[1] * 4 + 4 + 8)


# ---------------------------------------------------------------- sklearn


def time_sklearn(name: str, X, y, args: argparse.Namespace, l2: float) -> dict:
    """One sklearn epoch on at most sklearn_max_rows rows (float64 input, conversion untimed)."""
    from threadpoolctl import threadpool_limits

    from ..kernels import CSR

    rows = min(X.shape[0], args.sklearn_max_rows)
    if isinstance(X, CSR) and name == "mlp":
        rows = min(rows, args.sklearn_mlp_max_rows)
    if isinstance(X, CSR):
        Xs = X.rows(0, rows).to_scipy().astype(np.float64)
    else:
        Xs = np.asarray(X[:rows], dtype=np.float64)
    ys = y[:rows]
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        if name == "mlp":
            from sklearn.neural_network import MLPClassifier

            est = MLPClassifier(hidden_layer_sizes=(args.hidden,), solver="sgd", batch_size=args.batch_size,
                                learning_rate_init=0.05, alpha=l2, max_iter=1, shuffle=True, random_state=0)
            what = f"MLPClassifier(sgd, {args.hidden} relu, batch {args.batch_size})"
        else:
            from sklearn.linear_model import SGDClassifier

            est = SGDClassifier(loss=SKLEARN_LOSS[name], alpha=l2, max_iter=1, tol=None, shuffle=True,
                                learning_rate="constant", eta0=0.01, random_state=0)
            what = f"SGDClassifier(loss={SKLEARN_LOSS[name]})"
        t = time.perf_counter()
        est.fit(Xs, ys)
        s = time.perf_counter() - t
        acc = float(np.mean(est.predict(Xs[: min(rows, 200_000)]) == ys[: min(rows, 200_000)]))
    return {"sklearn_s": s, "sklearn_rows": rows, "sklearn": what, "sklearn_train_accuracy": acc}


# ---------------------------------------------------------------- driver


def format_table(results: list[dict], bw: float) -> str:
    """One row per (data, model)."""
    head = ("data", "model", "l2", "samples/s", "GB/s", "of BW", "py-loop/s", "sklearn/s", "x sklearn")
    rows = [head]
    for r in results:
        sk = r.get("sklearn_rate")
        rows.append((r["data"], r["model"], f"{r['l2']:g}", f"{r['rate']:.3g}", f"{r['gbps']:.2f}",
                     f"{r['gbps'] / bw:.0%}", f"{r['loop_rate']:.3g}", "-" if sk is None else f"{sk:.3g}",
                     "-" if sk is None else f"{r['rate'] / sk:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in rows)


def run(args: argparse.Namespace) -> int:
    """Run every (data kind, model) case and print the table."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    bw = stream_bandwidth()
    print(f"single-core streaming read: {bw:.2f} GB/s", flush=True)
    results = []
    for kind in args.kinds:
        t = time.perf_counter()
        if kind == "dense":
            binary = dense_data(args.dense_rows, args.dense_features, 2)
            multi = dense_data(args.dense_rows, args.dense_features, args.classes, seed=1)
            label, l2 = f"dense {args.dense_rows}x{args.dense_features}", args.l2
        else:
            binary = csr_data(args.csr_rows, args.csr_features, args.csr_nnz, 2)
            multi = csr_data(args.csr_rows, args.csr_features, args.csr_nnz, args.classes, seed=1)
            label, l2 = f"csr {args.csr_rows}x{args.csr_features} nnz/row {args.csr_nnz}", args.csr_l2
        print(f"{label}: generated in {time.perf_counter() - t:.1f} s", flush=True)
        for name in args.models:
            X, y = binary if name == "logistic" else multi
            C = 2 if name == "logistic" else args.classes
            r = {"data": label, "kind": kind, "model": name, "l2": l2, "rows": X.shape[0], "classes": C}
            r.update(time_ours(name, X, y, C, args, l2))
            r["rate"] = r["rows"] / r["kernel_s"]
            r["loop_rate"] = r["rows"] / r["loop_s"]
            r["gbps"] = bytes_touched(X, r["rows"]) / r["kernel_s"] / 1e9
            r["fraction_of_bandwidth"] = r["gbps"] / bw
            if not args.no_sklearn:
                r.update(time_sklearn(name, X, y, args, l2))
                r["sklearn_rate"] = r["sklearn_rows"] / r["sklearn_s"]
                r["speedup_vs_sklearn"] = r["rate"] / r["sklearn_rate"]
            results.append(r)
            print(f"  {name}: {r['rate']:.3g} samples/s, {r['gbps']:.2f} GB/s"
                  + (f", sklearn {r['sklearn_rate']:.3g}/s" if "sklearn_rate" in r else ""), flush=True)
    print()
    print(format_table(results, bw))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"stream_bandwidth_gbps": bw, "results": results, "machine": platform.processor() or
                       platform.machine(), "python": platform.python_version()}, fh, indent=2)
    return 0
