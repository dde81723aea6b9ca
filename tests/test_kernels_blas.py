"""The dense multiclass steps (softmax, svm, lsq) on BLAS and on loops against a plain numpy step, in float64."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mpikanel.kernels import bind, get_model
from mpikanel.kernels import _linear
from mpikanel.kernels._blocks import HAVE_BLAS, scratch_rows

KINDS = {"softmax": _linear.SOFTMAX, "svm": _linear.HINGE, "lsq": _linear.SQUARED}
STEPS = {"blas": _linear.dense_step_blas, "loop": _linear.dense_step_loop}
RTOL = 1e-10   # float64 throughout (rows widened from float32); only the order of summation differs


def numpy_step(name: str, w, X, y, idx, lr, l2, C):
    """w after one minibatch step, in plain numpy: w -= lr * (mean gradient + l2 * weights, no L2 on biases)."""
    d = X.shape[1]
    Xb = X[idx].astype(np.float64)
    W, b = w[: C * d].reshape(d, C), w[C * d:]
    Z = Xb @ W + b
    T = np.eye(C)[y[idx]]
    if name == "softmax":
        E = np.exp(Z - Z.max(axis=1, keepdims=True))
        R = E / E.sum(axis=1, keepdims=True) - T
    elif name == "svm":
        t = 2.0 * T - 1.0
        R = np.where(t * Z < 1.0, -t, 0.0)
    else:
        R = Z - T
    out = w.copy()
    out[: C * d] -= lr * ((Xb.T @ R).ravel() / len(idx) + l2 * w[: C * d])
    out[C * d:] -= lr * R.mean(axis=0)
    return out


def problem(n: int, d: int, C: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, C, n).astype(np.int32)
    w = 0.3 * rng.standard_normal(C * (d + 1))
    return X, y, w


def assert_step_close(got, want, w, lr):
    """The steps' gradients (w - w_after) / lr agree to RTOL, norm-wise and per component."""
    g, r = (w - got) / lr, (w - want) / lr
    assert np.linalg.norm(g - r) <= RTOL * np.linalg.norm(r)
    np.testing.assert_allclose(g, r, rtol=RTOL, atol=RTOL * np.abs(r).max())


@pytest.mark.parametrize("path", list(STEPS))
@pytest.mark.parametrize("name", list(KINDS))
@pytest.mark.parametrize("d,C,batch", [(100, 10, 64), (100, 10, 1), (7, 3, 33), (30, 2, 256)])
def test_dense_step_matches_numpy(name, path, d, C, batch):
    if path == "blas" and not HAVE_BLAS:
        pytest.skip("SciPy is not installed: no BLAS path")
    X, y, w = problem(500, d, C, seed=d + C + batch)
    idx = np.random.default_rng(batch).integers(0, 500, batch).astype(np.int64)
    lr, l2 = 0.1, 0.05
    scratch = np.full(_linear.multi_scratch_size(d, C), np.nan)   # the kernel must not read what it did not write
    got = w.copy()
    STEPS[path](got, X, y, idx, lr, l2, C, scratch, KINDS[name])
    assert_step_close(got, numpy_step(name, w, X, y, idx, lr, l2, C), w, lr)


@pytest.mark.parametrize("path", list(STEPS))
@pytest.mark.parametrize("name", list(KINDS))
def test_dense_step_in_row_blocks_matches_numpy(name, path):
    """A batch larger than the scratch's row block: the gradient summed block by block."""
    if path == "blas" and not HAVE_BLAS:
        pytest.skip("SciPy is not installed: no BLAS path")
    d, C, batch = 20, 4, 150
    X, y, w = problem(300, d, C, seed=5)
    idx = np.random.default_rng(6).integers(0, 300, batch).astype(np.int64)
    full = _linear.multi_scratch_size(d, C)
    scratch = np.full(full - (scratch_rows(d + C) - 16) * (d + C), np.nan)   # 16 rows a block: 10 blocks
    got = w.copy()
    STEPS[path](got, X, y, idx, 0.2, 0.01, C, scratch, KINDS[name])
    assert_step_close(got, numpy_step(name, w, X, y, idx, 0.2, 0.01, C), w, 0.2)


@pytest.mark.parametrize("name", list(KINDS))
def test_models_step_on_blas_when_scipy_is_installed(name):
    assert _linear.dense_step is (_linear.dense_step_blas if HAVE_BLAS else _linear.dense_step_loop)
    d, C = 50, 6
    X, y, w = problem(400, d, C, seed=9)
    bound = bind(get_model(name), X, y, C)
    idx = np.arange(0, 400, 5, dtype=np.int64)
    got = w.copy()
    bound.step(got, idx, 0.05, 1e-3, bound.scratch())
    assert_step_close(got, numpy_step(name, w, X, y, idx, 0.05, 1e-3, C), w, 0.05)
    again = w.copy()
    bound.step(again, idx, 0.05, 1e-3, bound.scratch())
    np.testing.assert_array_equal(again, got)   # same inputs, same bits


#: one softmax step on a small problem, its parameters printed (after a prelude that imports np, bind, get_model)
STEP_CODE = ("rng = np.random.default_rng(0)\n"
             "X = rng.standard_normal((40, 5)).astype(np.float32); y = rng.integers(0, 3, 40).astype(np.int32)\n"
             "w = rng.standard_normal(18); b = bind(get_model('softmax'), X, y, 3)\n"
             "b.step(w, np.arange(40, dtype=np.int64), 0.5, 0.0, b.scratch())\n"
             "print(' '.join(repr(float(v)) for v in w))\n")


def assert_a_fresh_process_steps_right(prelude: str) -> None:
    """`prelude`, then STEP_CODE, in a fresh Python: it succeeds and its step is numpy's."""
    done = subprocess.run([sys.executable, "-c", prelude + STEP_CODE], env=dict(os.environ), capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 5)).astype(np.float32)
    y = rng.integers(0, 3, 40).astype(np.int32)
    w = rng.standard_normal(18)
    expected = numpy_step("softmax", w, X, y, np.arange(40), 0.5, 0.0, 3)
    assert_step_close(np.array([float(v) for v in done.stdout.split()]), expected, w, 0.5)


def test_without_scipy_the_loop_step_is_used():
    assert_a_fresh_process_steps_right("import sys; sys.modules['scipy'] = None\n"
                                       "import numpy as np\n"
                                       "from mpikanel.kernels import _linear, bind, get_model\n"
                                       "assert _linear.dense_step is _linear.dense_step_loop\n")


@pytest.mark.skipif(not HAVE_BLAS, reason="SciPy not installed: no BLAS to load")
def test_warmup_loads_blas_without_scipy_linalg_and_the_blas_step_is_right():
    # scipy.linalg costs every rank 0.4 s of CPU at start-up; its cython_blas module alone serves numba
    assert_a_fresh_process_steps_right(
        "import sys\n"
        "import numpy as np\n"
        "from mpikanel.kernels import _linear, bind, get_model, warmup\n"
        "warmup(get_model('softmax'))\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg imported'\n"
        "import numba.np.arraymath\n"
        "assert numba.np.arraymath._HAVE_BLAS and _linear.dense_step is _linear.dense_step_blas\n")
