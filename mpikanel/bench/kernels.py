"""``bench kernels``: one SGD epoch per model on dense and CSR data against its roofline and scikit-learn.

For every model and data kind it times one shuffled epoch of minibatch steps (the kernels alone,
driven from a numba loop, and the same through ``BoundModel.step`` from Python as the worker loop
calls it) and reports samples/s and the roofline.  The rows are split 80/10/10: the epochs run on
the first 80%, the learning rate is the one of ``--lrs`` whose epoch scores best on the next 10%
(validation), and the accuracy reported is on the last 10% (test), for us and for scikit-learn
alike.  Memory roof: bytes touched (feature bytes + label + row index, CSR: indices + values +
indptr) over the single-core streaming-read bandwidth.  Compute roof: flops (the multiply-adds of
the forward and backward products, 2 per FMA; exp/max not counted) over the machine's
large-matrix gemm rate in the kernels' precision (numpy matmul of two 2000x2000 float64 matrices,
one BLAS thread, best of 3).  Both roofs are measured in the same run and recorded in the JSON;
the larger of the two times is the bound that applies (BW or compute), and "of bound" is the rate
reached as a fraction of it.  "of mm" compares the flop rate with numpy's float64 matmul of the
minibatch's shape (batch x features @ features x units), also measured here.  Last,
scikit-learn doing one epoch of the same model in the same run (SGDClassifier with the matching
loss and a constant rate; MLPClassifier(solver="sgd") for mlp), its rate chosen from
``--sklearn-lrs`` on the same validation rows, given float64 inputs (its native dtype; the
conversion is not timed): its test accuracy is reported next to ours, and a baseline within
CHANCE_MARGIN of the majority-class accuracy did not learn, so no speedup over it is given.
Single thread throughout; the load average is recorded (other jobs share the machine).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
import warnings

import numpy as np
from numba import njit

from .launch import results_dir  # noqa: F401  - re-exported: with --out this bench writes a result set
from .launch import write_results
from .sync import markdown_table

SKLEARN_LOSS = {"logistic": "log_loss", "softmax": "log_loss", "svm": "hinge", "lsq": "squared_error"}
MODELS = ("logistic", "softmax", "svm", "lsq", "mlp")
#: The kernels' arithmetic precision: parameters are float64 and rows are widened to float64.
KERNEL_DTYPE = np.float64
#: Side of the square matmul whose rate is the compute roof.
ROOF_N = 2000
#: A baseline whose accuracy is below the majority-class accuracy plus this did not learn.
CHANCE_MARGIN = 0.05
#: Learning rates tried per case (ours: the minibatch-mean step's rate; sklearn: eta0 / learning_rate_init).
LRS = (0.003125, 0.0125, 0.05, 0.2, 0.8, 3.2, 12.8)
SKLEARN_LRS = (0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0)
#: Shares of the rows held out: validation (the rate is chosen on it), then test (accuracy reported).
VAL_SHARE = 0.1
TEST_SHARE = 0.1


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
    parser.add_argument("--sklearn-max-rows", type=int, default=1_000_000,
                        help="sklearn runs on at most this many training rows (rate per sample compared; "
                             "the default covers every training row at the default sizes, so both accuracies come from the same data)")
    parser.add_argument("--sklearn-mlp-max-rows", type=int, default=20_000,
                        help="row cap of sklearn's MLPClassifier on CSR data (~1e3 rows/s there)")
    parser.add_argument("--no-sklearn", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per case (best reported)")
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS),
                        help="our learning rates: each case runs one epoch per rate, the best on validation is timed")
    parser.add_argument("--sklearn-lrs", type=float, nargs="+", default=list(SKLEARN_LRS),
                        help="scikit-learn's rates (eta0, learning_rate_init), chosen on validation likewise")
    parser.add_argument("--json", metavar="PATH", help="write the results to PATH")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="write a result set here: results.json, results.md and provenance.json")


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


@contextlib.contextmanager
def one_blas_thread():
    """Limit the loaded BLAS/OpenMP pools to one thread inside the block (no-op without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield


def gemm_roof(n: int = ROOF_N, repeats: int = 3, dtype=KERNEL_DTYPE) -> float:
    """The compute roof in GFLOP/s: numpy matmul of two n x n matrices of dtype, one BLAS thread, best of repeats."""
    rng = np.random.default_rng(0)
    A, B = rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)
    out = np.empty((n, n), dtype=dtype)
    with one_blas_thread():
        np.matmul(A[:64, :64], B[:64, :64])
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            np.matmul(A, B, out=out)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def matmul_rate(m: int, k: int, n: int, repeats: int = 5, seconds: float = 0.05) -> float:
    """numpy float64 matmul (m x k) @ (k x n) rate in GFLOP/s, one BLAS thread, best of repeats."""
    rng = np.random.default_rng(0)
    A, B, out = rng.random((m, k)), rng.random((k, n)), np.empty((m, n))
    with one_blas_thread():
        np.matmul(A, B, out=out)
        reps = max(1, int(seconds * 2e10 / (2 * m * k * n)))
        best = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(reps):
                np.matmul(A, B, out=out)
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t) / 1e9)
    return best


def flops_per_sample(name: str, X, C: int, hidden: int) -> float:
    """Flops of one sample's forward and backward products (2 per multiply-add; exp/max not counted)."""
    from ..kernels import CSR

    k = X.nnz / X.shape[0] if isinstance(X, CSR) else X.shape[1]
    if name == "mlp":
        return 4.0 * k * hidden + 6.0 * hidden * C   # X@W1, Xb^T dA; Hh@W2^T, R^T Hh, R@W2
    units = 1 if name == "logistic" else C
    return 4.0 * k * units                          # X@W, Xb^T R


def units_of(name: str, C: int, hidden: int) -> int:
    """Width of the model's first product (classes, 1, or hidden units)."""
    return hidden if name == "mlp" else (1 if name == "logistic" else C)


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


def split_rows(X, y) -> tuple[tuple, tuple, tuple]:
    """(train, validation, test) pairs of (X, y): the rows in order, VAL_SHARE and TEST_SHARE held out last."""
    n = X.shape[0]
    a = n - int(n * (VAL_SHARE + TEST_SHARE))
    b = n - int(n * TEST_SHARE)
    return tuple((_rows(X, lo, hi), y[lo:hi]) for lo, hi in ((0, a), (a, b), (b, n)))


def accuracy(model, w: np.ndarray, part: tuple, C: int) -> float:
    """Share of part's rows (X, y) that w classifies right (0.0 for non-finite parameters)."""
    from ..kernels import bind

    X, y = part
    if not np.all(np.isfinite(w)) or X.shape[0] == 0:
        return 0.0
    return bind(model, X, y, C).correct(w) / X.shape[0]


def time_ours(name: str, train: tuple, val: tuple, test: tuple, C: int, args: argparse.Namespace,
              l2: float) -> dict:
    """The rate of args.lrs best on val, then best-of-repeats epoch time on train (numba driver and
    BoundModel.step) and the test accuracy."""
    from ..kernels import CSR, bind, get_model

    X, y = train
    model = get_model(name, hidden=args.hidden, activation="relu")
    csr = isinstance(X, CSR)
    d = X.shape[1]
    n = X.shape[0]
    bound = bind(model, X, y, C)
    w0 = model.init(model.n_params(d, C), d, C, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    step, extra = _kernel_and_extra(name, "relu", csr)
    if not csr and name == "logistic":
        step, extra = _LOG_DENSE, 0   # the hand-written dense logistic kernel

    def epoch(w, order, lr, scratch):
        if csr:
            _epoch_csr(step, w, X.indptr, X.indices, X.data, d, y, order, args.batch_size, lr, l2, C, scratch, extra)
        else:
            _epoch_dense(step, w, X, y, order, args.batch_size, lr, l2, C, scratch, extra)

    epoch(w0.copy(), np.arange(min(n, 2 * args.batch_size), dtype=np.int64), args.lrs[0], bound.scratch())  # compile
    by_lr = {}
    for lr in args.lrs:
        w = w0.copy()
        epoch(w, rng.permutation(n).astype(np.int64), lr, bound.scratch())
        by_lr[lr] = accuracy(model, w, val, C)
    lr = max(args.lrs, key=lambda r: by_lr[r])   # the first of equals: the smallest rate if listed ascending
    kernel_s, loop_s, cpu_s = [], [], []
    for rep in range(args.repeats):
        order = rng.permutation(n).astype(np.int64)
        w, scratch = w0.copy(), bound.scratch()
        t, tc = time.perf_counter(), time.thread_time()
        epoch(w, order, lr, scratch)
        kernel_s.append(time.perf_counter() - t)
        cpu_s.append(time.thread_time() - tc)
        if not np.all(np.isfinite(w)):
            raise RuntimeError(f"{name}: non-finite parameters after one epoch at the chosen rate {lr}")
        if rep:
            continue   # the Python-driven loop is timed once
        w1 = w0.copy()
        t = time.perf_counter()
        b = args.batch_size
        for k in range(0, n, b):
            bound.step(w1, order[k:k + b], lr, l2, scratch)
        loop_s.append(time.perf_counter() - t)
    return {"kernel_s": min(kernel_s), "kernel_cpu_s": min(cpu_s), "loop_s": min(loop_s), "lr": lr,
            "val_accuracy_by_lr": {str(k): v for k, v in by_lr.items()}, "test_accuracy": accuracy(model, w, test, C),
            "chance_accuracy": chance_accuracy(test[1])}


def _rows(X, lo: int, hi: int):
    """Rows [lo, hi) of dense or CSR data."""
    return X[lo:hi] if isinstance(X, np.ndarray) else X.rows(lo, hi)


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


def time_sklearn(name: str, train: tuple, val: tuple, test: tuple, args: argparse.Namespace, l2: float) -> dict:
    """One sklearn epoch per rate of args.sklearn_lrs on at most sklearn_max_rows training rows (float64
    input, conversion untimed); the rate best on val is reported with its time and test accuracy."""
    from threadpoolctl import threadpool_limits

    from ..kernels import CSR

    X, y = train
    rows = min(X.shape[0], args.sklearn_max_rows)
    if isinstance(X, CSR) and name == "mlp":
        rows = min(rows, args.sklearn_mlp_max_rows)

    def f64(part_X, n):
        part = _rows(part_X, 0, n)
        return part.to_scipy().astype(np.float64) if isinstance(part, CSR) else np.asarray(part, dtype=np.float64)

    Xs, ys = f64(X, rows), y[:rows]
    Xv, Xt = f64(val[0], val[0].shape[0]), f64(test[0], test[0].shape[0])
    tried = {}
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        for lr in args.sklearn_lrs:
            if name == "mlp":
                from sklearn.neural_network import MLPClassifier

                est = MLPClassifier(hidden_layer_sizes=(args.hidden,), solver="sgd", batch_size=args.batch_size,
                                    learning_rate_init=lr, alpha=l2, max_iter=1, shuffle=True, random_state=0)
            else:
                from sklearn.linear_model import SGDClassifier

                est = SGDClassifier(loss=SKLEARN_LOSS[name], alpha=l2, max_iter=1, tol=None, shuffle=True,
                                    learning_rate="constant", eta0=lr, random_state=0)
            t = time.perf_counter()
            est.fit(Xs, ys)
            s = time.perf_counter() - t
            tried[lr] = (float(np.mean(est.predict(Xv) == val[1])), s, est)
        lr = max(args.sklearn_lrs, key=lambda r: tried[r][0])
        val_acc, s, est = tried[lr]
        acc = float(np.mean(est.predict(Xt) == test[1]))
    what = (f"MLPClassifier(sgd, {args.hidden} relu, batch {args.batch_size})" if name == "mlp"
            else f"SGDClassifier(loss={SKLEARN_LOSS[name]}, constant rate)")
    chance = chance_accuracy(test[1])
    return {"sklearn_s": s, "sklearn_rows": rows, "sklearn": what, "sklearn_lr": lr,
            "sklearn_val_accuracy_by_lr": {str(k): v[0] for k, v in tried.items()},
            "sklearn_test_accuracy": acc, "sklearn_chance_accuracy": chance,
            "sklearn_learned": acc >= chance + CHANCE_MARGIN}


def chance_accuracy(y: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent label (0 for no labels)."""
    return float(np.bincount(y).max() / y.size) if y.size else 0.0


def baseline_learned(r: dict) -> bool | None:
    """Whether the result's scikit-learn baseline learned (None: no baseline); results written before
    the chance accuracy was recorded are judged against 1/classes."""
    if r.get("sklearn_rate") is None:
        return None
    if "sklearn_learned" in r:
        return bool(r["sklearn_learned"])
    return _sk_accuracy(r) >= 1.0 / r["classes"] + CHANCE_MARGIN


def _accuracy(r: dict) -> float:
    """The result's accuracy: on test rows; sets written before the split hold the training accuracy."""
    return r.get("test_accuracy", r.get("train_accuracy"))


def _sk_accuracy(r: dict) -> float:
    return r.get("sklearn_test_accuracy", r.get("sklearn_train_accuracy"))


# ---------------------------------------------------------------- driver


HEADER = ("data", "model", "samples/s", "GB/s", "GF/s", "bound", "bound/s", "of bound", "of mm",
          "py-loop/s", "lr", "acc", "sklearn/s", "sk lr", "sk acc", "x sklearn")


def _cells(r: dict) -> list[str]:
    sk = r.get("sklearn_rate")
    speedup = "-" if sk is None else f"{r['rate'] / sk:.1f}" if baseline_learned(r) else "baseline did not learn"
    return [r["data"], r["model"], f"{r['rate']:.3g}", f"{r['gbps']:.2f}", f"{r['gflops']:.1f}",
            r["bound"], f"{r['bound_rate']:.3g}", f"{r['fraction_of_bound']:.0%}",
            f"{r['fraction_of_matmul']:.0%}", f"{r['loop_rate']:.3g}", _lr(r.get("lr")), f"{_accuracy(r):.3f}",
            "-" if sk is None else f"{sk:.3g}", "-" if sk is None else _lr(r.get("sklearn_lr")),
            "-" if sk is None else f"{_sk_accuracy(r):.3f}", speedup]


def _lr(v) -> str:
    return "-" if v is None else f"{v:g}"


def format_table(results: list[dict]) -> str:
    """One row per (data, model), aligned text for the terminal."""
    rows = [list(HEADER)] + [_cells(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in rows)


def format_markdown(results: list[dict]) -> str:
    """One row per (data, model), as a markdown table (the result set's results.md)."""
    return markdown_table(HEADER, [_cells(r) for r in results])


def roofline(r: dict, X, name: str, bw: float, roof: float, mm: float, hidden: int) -> None:
    """Add the roofline fields to a result: bytes and flops per sample, the bound that applies, fractions.

    bw: the memory roof (GB/s); roof: the compute roof (GFLOP/s); mm: the minibatch-shaped matmul's rate.
    """
    n = r["rows"]
    r["bytes_per_sample"] = bytes_touched(X, n) / n
    r["flops_per_sample"] = flops_per_sample(name, X, r["classes"], hidden)
    t_bw = r["bytes_per_sample"] / (bw * 1e9)
    t_fl = r["flops_per_sample"] / (roof * 1e9)
    r["bound"] = "BW" if t_bw >= t_fl else "compute"
    r["bound_rate"] = 1.0 / max(t_bw, t_fl)
    r["fraction_of_bound"] = r["rate"] / r["bound_rate"]
    r["gflops"] = r["rate"] * r["flops_per_sample"] / 1e9
    r["matmul_gflops"] = mm
    r["fraction_of_matmul"] = r["gflops"] / mm
    r["cpu_rate"] = n / r["kernel_cpu_s"]


def run(args: argparse.Namespace) -> int:
    """Run every (data kind, model) case and print the table."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from ..kernels import drop_stale_cache, set_threads
    from ..kernels._blocks import HAVE_BLAS

    threads = set_threads(1)
    drop_stale_cache()      # the kernels are called directly here, not through warmup
    load0 = os.getloadavg()
    bw = stream_bandwidth()
    roof = gemm_roof()
    roof_what = f"numpy matmul {ROOF_N}x{ROOF_N} {np.dtype(KERNEL_DTYPE).name}, 1 BLAS thread, best of 3"
    products = "BLAS (SciPy)" if HAVE_BLAS else "loops (no SciPy)"
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; memory roof (single-core streaming read): "
          f"{bw:.2f} GB/s; compute roof ({roof_what}): {roof:.1f} GFLOP/s; dense multiclass products on "
          f"{products}", flush=True)
    mm_cache: dict[tuple[int, int, int], float] = {}
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
            train, val, test = split_rows(*(binary if name == "logistic" else multi))
            X = train[0]
            C = 2 if name == "logistic" else args.classes
            r = {"data": label, "kind": kind, "model": name, "l2": l2, "rows": X.shape[0], "classes": C,
                 "val_rows": val[0].shape[0], "test_rows": test[0].shape[0]}
            r.update(time_ours(name, train, val, test, C, args, l2))
            r["rate"] = r["rows"] / r["kernel_s"]
            r["loop_rate"] = r["rows"] / r["loop_s"]
            r["gbps"] = bytes_touched(X, r["rows"]) / r["kernel_s"] / 1e9
            r["fraction_of_bandwidth"] = r["gbps"] / bw
            k = int(round(X.nnz / X.shape[0])) if kind == "csr" else X.shape[1]
            shape = (args.batch_size, k, units_of(name, C, args.hidden))
            if shape not in mm_cache:
                mm_cache[shape] = matmul_rate(*shape)
            roofline(r, X, name, bw, roof, mm_cache[shape], args.hidden)
            if not args.no_sklearn:
                r.update(time_sklearn(name, train, val, test, args, l2))
                r["sklearn_rate"] = r["sklearn_rows"] / r["sklearn_s"]
                r["speedup_vs_sklearn"] = r["rate"] / r["sklearn_rate"] if r["sklearn_learned"] else None
                if not r["sklearn_learned"]:
                    r["sklearn_note"] = "baseline did not learn"
            results.append(r)
            line = (f"  {name}: {r['rate']:.3g} samples/s, {r['gbps']:.2f} GB/s, lr {r['lr']:g}, "
                    f"test accuracy {r['test_accuracy']:.3f}")
            if "sklearn_rate" in r:
                line += (f"; sklearn {r['sklearn_rate']:.3g}/s, lr {r['sklearn_lr']:g}, "
                         f"test accuracy {r['sklearn_test_accuracy']:.3f}")
                line += "" if r["sklearn_learned"] else " (baseline did not learn)"
            print(line, flush=True)
    load1 = os.getloadavg()
    print()
    print(f"load average at start {load0[0]:.2f}, at end {load1[0]:.2f}; memory roof {bw:.2f} GB/s; "
          f"compute roof {roof:.1f} GFLOP/s; numpy matmul of the minibatch shape: "
          + ", ".join(f"{m}x{k}@{k}x{n} {v:.1f}" for (m, k, n), v in mm_cache.items()) + " GFLOP/s")
    print(format_table(results))
    doc = {"stream_bandwidth_gbps": bw, "memory_roof_gbps": bw,
           "memory_roof": "single-core streaming read of a 1 GiB float32 array, best of 5",
           "compute_roof_gflops": roof, "compute_roof": roof_what, "dense_multiclass_products": products,
           "chance_margin": CHANCE_MARGIN, "lrs": list(args.lrs), "sklearn_lrs": list(args.sklearn_lrs),
           "split": {"train": 1 - VAL_SHARE - TEST_SHARE, "validation": VAL_SHARE, "test": TEST_SHARE},
           "load_average_start": load0,
           "load_average_end": load1, "threads": threads,
           "matmul_gflops": {f"{m}x{k}@{k}x{n}": v for (m, k, n), v in mm_cache.items()},
           "results": results, "machine": platform.processor() or platform.machine(),
           "python": platform.python_version()}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
    if args.out:
        write_results(args.out, format_markdown(results), **doc)
    return 0
