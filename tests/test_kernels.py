"""Tests for mpikanel.kernels: gradients (finite differences and numpy references), dense vs CSR,
losses, predictions, stability, initialisation, registry and user-defined models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from mpikanel.errors import InputError
from mpikanel.kernels import (BUILTIN, CSR, KERNELS, bind, get_model, l2_penalty, register_model,
                              set_threads, unregister_model, warmup)
from mpikanel.kernels._blocks import exp_inplace, gemm, scratch_rows
from mpikanel.kernels.mlp import views

# ---------------------------------------------------------------- numpy references

H_TEST = 5


def model_of(name: str):
    """The model under test; mlp-tanh is mlp with tanh, mlp with H_TEST units."""
    if name.startswith("mlp"):
        return get_model("mlp", hidden=H_TEST, activation="tanh" if name.endswith("tanh") else "relu")
    return get_model(name)


def _mlp_forward(w, X64, C, act):
    d = X64.shape[1]
    W1, W2, b1, b2 = views(w, d, C)
    A = X64 @ W1 + b1
    Hh = np.maximum(A, 0.0) if act == "relu" else np.tanh(A)
    return A, Hh, Hh @ W2.T + b2


def _softmax_ce(Z, y):
    n = Z.shape[0]
    m = Z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(Z - m).sum(axis=1))
    P = np.exp(Z - lse[:, None])
    P[np.arange(n), y] -= 1.0
    return lse - Z[np.arange(n), y], P


def ref_scores(name, w, X, C):
    """Per-row scores whose argmax is the prediction."""
    X64 = X.astype(np.float64)
    d = X.shape[1]
    if name == "logistic":
        z = X64 @ w[:d] + w[d]
        return np.stack([np.zeros_like(z), z], axis=1)
    if name.startswith("mlp"):
        return _mlp_forward(w, X64, C, "tanh" if name.endswith("tanh") else "relu")[2]
    return X64 @ w[: C * d].reshape(d, C) + w[C * d:]  # W^T stored (d, C)


def ref_loss_and_dz(name, w, X, y, C):
    """Per-sample loss and dloss/dscores, float64 numpy."""
    X64 = X.astype(np.float64)
    n, d = X.shape
    if name == "logistic":
        z = X64 @ w[:d] + w[d]
        s = 2.0 * y - 1.0
        return np.logaddexp(0.0, -s * z), (np.exp(-np.logaddexp(0.0, -z)) - y)[:, None]
    Z = ref_scores(name, w, X, C)
    T = np.eye(C)[y]
    if name == "svm":
        t = 2.0 * T - 1.0
        active = t * Z < 1.0
        return np.where(active, 1.0 - t * Z, 0.0).sum(axis=1), np.where(active, -t, 0.0)
    if name == "lsq":
        R = Z - T
        return 0.5 * (R ** 2).sum(axis=1), R
    return _softmax_ce(Z, y)


def ref_loss_vec(name, w, X, y, C):
    return ref_loss_and_dz(name, w, X, y, C)[0]


def ref_grad(name, w, X, y, C, l2):
    """Gradient of mean loss + 0.5*l2*||weights||^2 (no L2 on biases)."""
    X64 = X.astype(np.float64)
    n, d = X.shape
    _, dZ = ref_loss_and_dz(name, w, X, y, C)
    g = np.zeros_like(w)
    if name.startswith("mlp"):
        act = "tanh" if name.endswith("tanh") else "relu"
        A, Hh, _ = _mlp_forward(w, X64, C, act)
        gW1, gW2, gb1, gb2 = views(g, d, C)
        W1, W2, _, _ = views(w, d, C)
        gW2[:] = dZ.T @ Hh / n
        gb2[:] = dZ.mean(axis=0)
        dH = dZ @ W2
        dA = dH * (A > 0) if act == "relu" else dH * (1.0 - Hh ** 2)
        gW1[:] = X64.T @ dA / n
        gb1[:] = dA.mean(axis=0)
    else:
        U = dZ.shape[1]
        g[: U * d] = (X64.T @ dZ / n).ravel()
        g[U * d:] = dZ.mean(axis=0)
    nw = model_of(name).head(d, C)
    g[:nw] += l2 * w[:nw]
    return g


def make_problem(name, n, d, C, seed, scale=1.0, sparsity=0.0):
    rng = np.random.default_rng(seed)
    model = model_of(name)
    X = rng.standard_normal((n, d)).astype(np.float32)
    if sparsity:
        X[rng.random((n, d)) < sparsity] = 0.0
    y = rng.integers(0, C, n).astype(np.int32)
    w = scale * rng.standard_normal(model.n_params(d, C))
    return model, X, y, w


NAMES = ("logistic", "softmax", "svm", "lsq", "mlp", "mlp-tanh")
CASES = [("logistic", 2), ("softmax", 2), ("softmax", 5), ("svm", 2), ("svm", 4), ("lsq", 3),
         ("mlp", 3), ("mlp-tanh", 4)]


@pytest.fixture(scope="module", autouse=True)
def _compile():
    for name in NAMES:
        warmup(model_of(name))


def _bound(model, X, y, C, sparse):
    return bind(model, CSR.from_dense(X) if sparse else X, y, C)


def _step_gradient(model, w, X, y, idx, lr, l2, C, sparse=False):
    b = _bound(model, X, y, C, sparse)
    scratch = np.full(b.scratch().size, np.nan)  # kernel must not rely on its contents
    w_after = w.copy()
    b.step(w_after, idx, lr, l2, scratch)
    return (w - w_after) / lr


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("name,C", CASES)
def test_sgd_step_matches_finite_difference(name, C, sparse):
    d, l2, lr = 7, 0.3, 1e-3
    model, X, y, w = make_problem(name, 40, d, C, seed=1, sparsity=0.3 if sparse else 0.0)
    idx = np.array([3, 17, 0, 17, 39, 8, 21, 5, 30, 11], dtype=np.int64)  # includes a duplicate
    g = _step_gradient(model, w, X, y, idx, lr, l2, C, sparse)

    Xb, yb = np.ascontiguousarray(X[idx]), y[idx]
    nw = model.head(d, C)
    bb = _bound(model, Xb, yb, C, sparse)

    def objective(v):
        return bb.loss_sum(v) / len(idx) + 0.5 * l2 * np.dot(v[:nw], v[:nw])

    eps = 1e-6
    fd = np.empty_like(w)
    for k in range(w.size):
        e = np.zeros_like(w)
        e[k] = eps
        fd[k] = (objective(w + e) - objective(w - e)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name,C", CASES)
def test_sgd_step_matches_numpy_reference(name, C):
    d, l2, lr = 11, 0.05, 0.1
    model, X, y, w = make_problem(name, 200, d, C, seed=2)
    idx = np.random.default_rng(3).integers(0, 200, 64).astype(np.int64)
    g = _step_gradient(model, w, X, y, idx, lr, l2, C)
    ref = ref_grad(name, w, X[idx], y[idx], C, l2)
    np.testing.assert_allclose(g, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name,C", CASES)
def test_dense_and_csr_agree(name, C):
    d, l2, lr = 30, 0.01, 0.05
    model, X, y, w = make_problem(name, 300, d, C, seed=12, scale=0.3, sparsity=0.8)
    dense, sparse = bind(model, X, y, C), bind(model, CSR.from_dense(X), y, C)
    assert sparse.sparse and not dense.sparse
    np.testing.assert_allclose(sparse.loss_sum(w), dense.loss_sum(w), rtol=1e-10)
    np.testing.assert_array_equal(sparse.predict(w), dense.predict(w))
    w_d, w_s = w.copy(), w.copy()
    s_d, s_s = dense.scratch(), sparse.scratch()
    rng = np.random.default_rng(13)
    for _ in range(20):
        idx = rng.integers(0, 300, 16).astype(np.int64)
        dense.step(w_d, idx, lr, l2, s_d)
        sparse.step(w_s, idx, lr, l2, s_s)
    np.testing.assert_allclose(w_s, w_d, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("name,C", CASES)
def test_sgd_step_empty_batch_is_noop(name, C, sparse):
    model, X, y, w = make_problem(name, 10, 4, C, seed=4)
    b = _bound(model, X, y, C, sparse)
    w2 = w.copy()
    b.step(w2, np.zeros(0, np.int64), 0.5, 0.1, b.scratch())
    np.testing.assert_array_equal(w, w2)


# ---------------------------------------------------------------- loss, predict, l2


@pytest.mark.parametrize("name,C", CASES)
def test_loss_sum_matches_reference(name, C):
    model, X, y, w = make_problem(name, 300, 9, C, seed=5)
    got = model.loss_sum(w, X, y, C)
    assert isinstance(got, float)
    np.testing.assert_allclose(got, ref_loss_vec(name, w, X, y, C).sum(), rtol=1e-10)
    parts = model.loss_sum(w, X[:100], y[:100], C) + model.loss_sum(w, X[100:], y[100:], C)
    np.testing.assert_allclose(parts, got, rtol=1e-12)


@pytest.mark.parametrize("name,C", CASES)
def test_predict_matches_argmax(name, C):
    model, X, y, w = make_problem(name, 300, 9, C, seed=6)
    got = model.predict(w, X, C)
    assert got.dtype == np.int32 and got.shape == (300,)
    np.testing.assert_array_equal(got, ref_scores(name, w, X, C).argmax(axis=1))


@pytest.mark.parametrize("name,C", [("logistic", 2), ("softmax", 2), ("softmax", 5), ("svm", 3), ("lsq", 3)])
def test_l2_penalty_excludes_biases(name, C):
    model, _, _, w = make_problem(name, 1, 6, C, seed=7)
    nw = model.head(6, C)
    assert nw == (6 if name == "logistic" else 6 * C)
    assert l2_penalty(w, 6, C, 0.2) == pytest.approx(0.5 * 0.2 * np.sum(w[:nw] ** 2), rel=1e-12)
    w2 = w.copy()
    w2[nw:] = 123.0
    assert l2_penalty(w2, 6, C, 0.2) == pytest.approx(l2_penalty(w, 6, C, 0.2), rel=1e-12)


def test_mlp_layout_views_and_init():
    model = get_model("mlp", hidden=8)
    d, C = 6, 3
    n = model.n_params(d, C)
    assert n == 8 * (6 + 3 + 1) + 3 and model.head(d, C) == 8 * (6 + 3)
    w = model.init(n, d, C, np.random.default_rng([0, 12345]))
    again = model.init(n, d, C, np.random.default_rng([0, 12345]))
    np.testing.assert_array_equal(w, again)  # same seed -> same start on every rank
    W1, W2, b1, b2 = views(w, d, C)
    assert W1.shape == (6, 8) and W2.shape == (3, 8) and b1.shape == (8,) and b2.shape == (3,)
    assert np.shares_memory(W1, w) and np.shares_memory(b2, w)
    assert np.all(b1 == 0) and np.all(b2 == 0) and np.std(W1) > 0.1 and len(np.unique(W1)) == W1.size
    W1[0, 0] = 42.0
    assert w[0] == 42.0
    assert np.all(get_model("softmax").init(33, 10, 3, np.random.default_rng(0)) == 0)


def test_mlp_hyper_parameters_validated():
    assert get_model("mlp", hidden=3).n_params(2, 2) == 3 * 5 + 2
    assert get_model("mlp", hidden=None, activation=None).n_params(2, 2) == 64 * 5 + 2
    assert get_model("softmax", hidden=3) is KERNELS["softmax"]
    with pytest.raises(InputError, match="activation"):
        get_model("mlp", activation="sigmoid")
    with pytest.raises(InputError, match="hidden"):
        get_model("mlp", hidden=0)


# ---------------------------------------------------------------- numerical stability


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("name,C", [("logistic", 2), ("softmax", 2), ("softmax", 5), ("svm", 3), ("lsq", 3)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_huge_margins_stay_finite(name, C, sign, sparse):
    d = 4
    model = get_model(name)
    X = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [2, 0, 0, 0]], dtype=np.float32)
    y = np.array([1, 0, 1], dtype=np.int32)
    w = np.zeros(model.n_params(d, C))
    if name == "logistic":
        w[0], w[1] = sign * 1e4, -sign * 1e4  # margins +-1e4 and +-2e4
    else:
        w[0 * C + 1] = sign * 1e4  # feature 0 -> logit of class 1 (layout w[j*C + c])
        w[1 * C + 0] = sign * 1e4  # feature 1 -> logit of class 0
    b = _bound(model, X, y, C, sparse)
    loss = b.loss_sum(w)
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, ref_loss_vec(name, w, X, y, C).sum(), rtol=1e-12)
    if name in ("logistic", "softmax"):
        assert (loss < 1e-12) if sign > 0 else (loss > 1e4)  # confidently wrong: loss ~ margin, not inf
    w2 = w.copy()
    b.step(w2, np.arange(3, dtype=np.int64), 0.1, 0.01, b.scratch())
    assert np.all(np.isfinite(w2))
    assert np.array_equal(b.predict(w)[:2], [1, 0] if sign > 0 else [0, 1])


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_mlp_huge_inputs_stay_finite(act):
    model = get_model("mlp", hidden=4, activation=act)
    X = np.full((3, 5), 1e6, dtype=np.float32)
    y = np.array([0, 1, 2], dtype=np.int32)
    w = model.init(model.n_params(5, 3), 5, 3, np.random.default_rng(1)) * 100
    b = bind(model, X, y, 3)
    assert np.isfinite(b.loss_sum(w))
    b.step(w, np.arange(3, dtype=np.int64), 1e-12, 0.0, b.scratch())
    assert np.all(np.isfinite(w))


# ---------------------------------------------------------------- behaviour: training


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("name,C", CASES)
def test_training_reaches_high_accuracy(name, C, sparse):
    rng = np.random.default_rng(8)
    n, d = 2000, 20
    model = model_of(name)
    centers = 3.0 * rng.standard_normal((C, d))
    y = rng.integers(0, C, n).astype(np.int32)
    X = (centers[y] + rng.standard_normal((n, d))).astype(np.float32)
    b = _bound(model, X, y, C, sparse)
    w = model.init(model.n_params(d, C), d, C, np.random.default_rng(0))
    scratch = b.scratch()
    loss0 = b.loss_sum(w) / n
    lr = 0.01 if name == "lsq" else 0.1
    for _ in range(300):
        b.step(w, rng.integers(0, n, 32).astype(np.int64), lr, 1e-4, scratch)
    assert b.correct(w) / n > 0.95
    assert b.loss_sum(w) / n < 0.5 * loss0


# ---------------------------------------------------------------- registry


def test_registry_and_unknown_model():
    assert set(BUILTIN) <= set(KERNELS)
    assert BUILTIN == ("logistic", "softmax", "svm", "lsq", "mlp")
    assert get_model("softmax") is KERNELS["softmax"]
    assert all(KERNELS[n].supports_csr for n in BUILTIN)
    with pytest.raises(InputError, match=r"unknown model 'svmx'; choose from: logistic, softmax, svm, lsq, mlp"):
        get_model("svmx")


def test_param_and_scratch_sizes():
    lg, sm = get_model("logistic"), get_model("softmax")
    assert (lg.min_classes, lg.max_classes) == (2, 2)
    assert (sm.min_classes, sm.max_classes) == (2, None)
    assert lg.n_params(10, 2) == 11
    assert sm.n_params(10, 3) == 33 and get_model("svm").n_params(10, 3) == 33
    assert sm.n_params(1, 7) == 14
    assert lg.scratch_size(10, 2) >= 11
    assert sm.scratch_size(10, 3) >= 33


def test_bad_labels_raise():
    for name in ("softmax", "svm", "lsq", "mlp"):
        model, X, y, w = make_problem(name, 5, 3, 3, seed=9)
        y[2] = 3
        for sparse in (False, True):
            b = _bound(model, X, y, 3, sparse)
            with pytest.raises(ValueError):
                b.loss_sum(w)
            with pytest.raises(ValueError):
                b.step(w, np.arange(5, dtype=np.int64), 0.1, 0.0, b.scratch())
    lmodel, X, y, w = make_problem("logistic", 5, 3, 2, seed=9)
    y[0] = 2
    with pytest.raises(ValueError):
        lmodel.loss_sum(w, X, y, 2)


def test_csr_container():
    X = np.array([[0, 1.5, 0], [0, 0, 0], [2, 0, -1]], dtype=np.float32)
    A = CSR.from_dense(X)
    assert A.indptr.dtype == np.int64 and A.indices.dtype == np.int32 and A.data.dtype == np.float32
    assert A.shape == (3, 3) and A.nnz == 3
    np.testing.assert_array_equal(A.toarray(), X)
    np.testing.assert_array_equal(A.rows(1, 3).toarray(), X[1:])
    with pytest.raises(ValueError):
        CSR(np.array([0, 2]), np.array([0]), np.array([1.0]), (1, 3))


# ---------------------------------------------------------------- user-defined models


# The example's own kernels: the library compiles its own uncached copies of user kernels, so the
# example imported here and run as __main__ elsewhere share one numba cache directory safely.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from custom_model import sqhinge_grad as _sqhinge_grad, sqhinge_loss as _sqhinge_loss  # noqa: E402


def test_register_user_model_fd_and_training():
    model = register_model("sqhinge_test", _sqhinge_grad, _sqhinge_loss, lambda d, C: d + 1,
                           n_weights=lambda d, C: d, max_classes=2, replace=True)
    try:
        assert get_model("sqhinge_test") is model and not model.supports_csr
        warmup(model)
        with pytest.raises(ValueError, match="already registered"):
            register_model("sqhinge_test", _sqhinge_grad, _sqhinge_loss, lambda d, C: d + 1)
        with pytest.raises(ValueError):
            register_model("softmax", _sqhinge_grad, _sqhinge_loss, lambda d, C: d + 1)
        _, X, y, w = make_problem("logistic", 40, 5, 2, seed=10)
        idx = np.arange(10, dtype=np.int64)
        g = _step_gradient(model, w, X, y, idx, 1e-3, 0.2, 2)
        Xb, yb = X[:10], y[:10]

        def objective(v):
            return _sqhinge_loss(v, Xb, yb, 2) / 10 + 0.1 * np.dot(v[:5], v[:5])
        fd = np.array([(objective(w + e) - objective(w - e)) / 2e-6 for e in np.eye(6) * 1e-6])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
        with pytest.raises(InputError, match="no CSR kernels"):
            bind(model, CSR.from_dense(X), y, 2)
        # trains, and the default predict (linear layout, d+1 -> sign) works
        rng = np.random.default_rng(0)
        X = rng.standard_normal((500, 5)).astype(np.float32)
        y = (X[:, 0] - X[:, 1] > 0).astype(np.int32)
        b = bind(model, X, y, 2)
        w = np.zeros(6)
        for _ in range(200):
            b.step(w, rng.integers(0, 500, 16).astype(np.int64), 0.05, 1e-4, b.scratch())
        assert b.correct(w) / 500 > 0.95
    finally:
        unregister_model("sqhinge_test")
    assert "sqhinge_test" not in KERNELS


# ---------------------------------------------------------------- dense blocks, threads


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (64, 100, 10), (7, 5, 33), (10, 64, 64), (5, 9, 3), (13, 3, 17)])
@pytest.mark.parametrize("trans_a", [False, True])
def test_gemm_matches_numpy(M, K, N, trans_a):
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    A = rng.standard_normal((K, M) if trans_a else (M, K))
    B = rng.standard_normal((K, N))
    out = rng.standard_normal((M, N))
    ref = 0.7 * out - 0.3 * ((A.T if trans_a else A) @ B)
    gemm(out, A, trans_a, B, -0.3, 0.7)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    out[:] = np.nan  # beta = 0 never reads out
    gemm(out, A, trans_a, B, 1.0, 0.0)
    np.testing.assert_allclose(out, (A.T if trans_a else A) @ B, rtol=1e-12, atol=1e-12)


def test_exp_fast_accuracy():
    x = np.concatenate([np.linspace(-700.0, 700.0, 100_001), np.linspace(-1.0, 1.0, 10_001), [0.0]])
    got = x.copy()
    exp_inplace(got)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-15)
    tiny = np.array([-1e4, -800.0])
    exp_inplace(tiny)
    assert np.all((tiny > 0) & (tiny < 1e-300))  # clamped at exp(-708), never 0 or NaN


@pytest.mark.parametrize("name,C", [("softmax", 5), ("svm", 4), ("lsq", 3), ("mlp", 3), ("mlp-tanh", 4)])
def test_dense_step_in_row_blocks_matches_one_block(name, C):
    """A minibatch larger than the scratch's row block is processed block by block with the same result."""
    d, l2, lr = 11, 0.05, 0.1
    model, X, y, w = make_problem(name, 200, d, C, seed=21)
    idx = np.random.default_rng(22).integers(0, 200, 50).astype(np.int64)
    b = bind(model, X, y, C)
    full = b.scratch()
    w_one = w.copy()
    b.step(w_one, idx, lr, l2, full)
    row_len = d + C if not name.startswith("mlp") else d + 2 * H_TEST + C
    small = np.full(full.size - (scratch_rows(row_len) - 7) * row_len, np.nan)  # room for 7 rows: 8 blocks
    w_blocks = w.copy()
    b.step(w_blocks, idx, lr, l2, small)
    np.testing.assert_allclose(w_blocks, w_one, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose((w - w_blocks) / lr, ref_grad(name, w, X[idx], y[idx], C, l2), rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="wrong length"):
        b.step(w.copy(), idx, lr, l2, np.zeros(10))


def test_set_threads():
    import numba

    try:
        got = set_threads(1)
        assert got["requested"] == 1 and got["numba"] == 1 == numba.get_num_threads()
        assert got["numba_max"] == numba.config.NUMBA_NUM_THREADS
        assert got["blas"] in (None, 1)
        got = set_threads(64)
        assert got["numba"] == min(64, numba.config.NUMBA_NUM_THREADS) == numba.get_num_threads()
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="positive integer"):
                set_threads(bad)
    finally:
        set_threads(1)


def test_a_cold_kernel_cache_is_seen_before_anything_compiles(tmp_path):
    # the CLI says "compiling kernels, once" when this is true, before numba's ~20 s of compiling
    code = "from mpikanel.kernels import cache_is_cold; print(cache_is_cold())"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert cold.stdout.strip() == "True", cold.stderr
    # kernels_cached: only what mark_cached recorded after a warmup, for that model and kind alone
    warm_code = ("from mpikanel.kernels import cache_is_cold, get_model, kernels_cached, mark_cached, warmup\n"
                 "m = get_model('logistic'); warmup(m, sparse=False); print(cache_is_cold())\n"
                 "before = kernels_cached(m, sparse=False); mark_cached(m, sparse=False)\n"
                 "print(before, kernels_cached(m, sparse=False), kernels_cached(m), "
                 "kernels_cached(get_model('svm'), sparse=False))")
    warm = subprocess.run([sys.executable, "-c", warm_code], env=env, capture_output=True, text=True, timeout=300)
    assert warm.stdout.split() == ["False", "False", "True", "False", "False"], warm.stderr


def test_the_warm_marker_names_what_numba_keys_its_cache_by(monkeypatch):
    import numba

    from mpikanel.kernels import _warm_marker

    if _warm_marker(get_model("logistic"), True, True) is None:
        pytest.skip("numba does not cache the kernels here")
    names = {_warm_marker(get_model(m, **h), d, sp).name for m, h in
             (("logistic", {}), ("mlp", {}), ("mlp", {"activation": "tanh"})) for d, sp in ((True, False), (False, True))}
    assert len(names) == 6                          # model, its hyper-parameters, dense or CSR
    before = _warm_marker(get_model("logistic"), True, False)
    monkeypatch.setattr(numba, "__version__", "0.0.0")
    assert _warm_marker(get_model("logistic"), True, False) != before
    monkeypatch.undo()
    # a venv without SciPy compiles the dense kernels on loops: it may share the cache, not the marker
    import mpikanel.kernels._blocks as blocks

    monkeypatch.setattr(blocks, "HAVE_BLAS", not blocks.HAVE_BLAS)
    assert _warm_marker(get_model("logistic"), True, False) != before
    monkeypatch.undo()
    user = register_model("warm_marker_user", _sqhinge_grad, _sqhinge_loss, lambda d, C: d + 1, replace=True)
    try:
        assert _warm_marker(user, True, False) is None    # its sources are the user's: always warmed one rank first
    finally:
        unregister_model("warm_marker_user")


def test_a_cache_filled_from_other_kernel_sources_is_dropped_before_the_kernels_load(tmp_path, monkeypatch):
    # numba checks an entry against its own file only: an edit of an inlined helper alone would load old code
    import mpikanel.kernels as K

    monkeypatch.setattr(K, "_cache_dir", lambda: tmp_path)
    old = [tmp_path / n for n in ("_linear.csr_step-333.py311.nbi", "_linear.csr_step-333.py311.1.nbc",
                                  "mpikanel-warm-0123")]
    for p in old + [tmp_path / "kept.cpython-311.pyc"]:
        p.write_text("x")
    assert K.drop_stale_cache() is False                      # no record yet: these sources are recorded
    assert all(p.exists() for p in old)
    assert (tmp_path / K.SOURCES_FILE).read_text() == repr(K._source_stamps())
    assert K.drop_stale_cache() is False and all(p.exists() for p in old)
    stamps = K._source_stamps()
    monkeypatch.setattr(K, "_source_stamps", lambda: [(stamps[0][0], 1, 2)] + stamps[1:])   # one helper edited
    assert K.drop_stale_cache() is True
    assert not any(p.exists() for p in old) and (tmp_path / "kept.cpython-311.pyc").exists()
    assert (tmp_path / K.SOURCES_FILE).read_text() == repr(K._source_stamps())
    calls = []

    def bind(*args):
        calls.append("load")
        raise StopIteration                                   # nothing compiles here

    monkeypatch.setattr(K, "drop_stale_cache", lambda: calls.append("drop"))
    monkeypatch.setattr(K, "bind", bind)
    with pytest.raises(StopIteration):
        K.warmup(get_model("logistic"), dense=True, sparse=False)
    assert calls == ["drop", "load"]                          # before the kernels load


class _Comm:
    """What warm_ranks uses of a communicator: rank `rank` of ranks where `uncached` do not find the marker."""

    def __init__(self, rank: int, uncached_elsewhere: int, log: list):
        self.rank, self.others, self.log = rank, uncached_elsewhere, log

    def Get_rank(self) -> int:
        return self.rank

    def allreduce(self, x: int) -> int:
        return x + self.others

    def Barrier(self) -> None:
        self.log.append("barrier")


@pytest.mark.parametrize("rank", [0, 2])
@pytest.mark.parametrize("cached_here, uncached_elsewhere", [(True, 0), (True, 1), (False, 0)])
def test_warm_ranks_loads_on_every_rank_at_once_only_where_every_rank_has_the_marker(
        monkeypatch, rank, cached_here, uncached_elsewhere):
    from mpikanel import session

    log: list = []
    monkeypatch.setattr(session, "kernels_cached", lambda model, **kinds: cached_here)
    monkeypatch.setattr(session, "warmup", lambda model, **kinds: log.append(("warmup", kinds)))
    monkeypatch.setattr(session, "mark_cached", lambda model, **kinds: log.append("mark"))
    session.warm_ranks(_Comm(rank, uncached_elsewhere, log), get_model("logistic"), sparse=False)
    kinds = {"dense": True, "sparse": False}
    if cached_here and not uncached_elsewhere:
        assert log == [("warmup", kinds)]                              # no turn-taking
    elif rank == 0:
        assert log == [("warmup", kinds), "mark", "barrier"]           # compiles alone, then records it
    else:
        assert log == ["barrier", ("warmup", kinds), "mark"]           # loads what rank 0 compiled


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", ["mlp", "softmax", "svm", "lsq", "logistic"])
def test_a_diverged_step_gives_non_finite_numbers_not_an_exception(name, sparse):
    # overflowing logits made a softmax's normaliser 0 and numba raised ZeroDivisionError from inside
    # the step; the kernels now let inf/NaN through, which the worker loop reports as a TrainingError
    rng = np.random.default_rng(0)
    C = 2 if name == "logistic" else 3
    X = rng.standard_normal((64, 20)).astype(np.float32)
    y = rng.integers(0, C, 64).astype(np.int32)
    if sparse:
        X = CSR.from_dense(X)
    model = get_model(name)
    w = 1e300 * np.sign(rng.standard_normal(model.n_params(20, C)))
    b = bind(model, X, y, C)
    b.step(w, np.arange(64), 0.1, 1e-4, b.scratch())
    b.loss_sum(w)
    if name == "mlp":
        assert not np.all(np.isfinite(w))

