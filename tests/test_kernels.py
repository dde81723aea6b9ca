"""Tests for mpikanel.kernels: gradients, losses, predictions, stability, registry."""

from __future__ import annotations

import numpy as np
import pytest

from mpikanel.errors import InputError
from mpikanel.kernels import KERNELS, get_model, l2_penalty, warmup

# ---------------------------------------------------------------- numpy references


def ref_loss_vec(name: str, w: np.ndarray, X: np.ndarray, y: np.ndarray, C: int) -> np.ndarray:
    """Per-sample loss, computed in float64 numpy."""
    X64 = X.astype(np.float64)
    n, d = X.shape
    if name == "logistic":
        z = X64 @ w[:d] + w[d]
        s = 2.0 * y - 1.0
        return np.logaddexp(0.0, -s * z)
    Z = X64 @ w[: C * d].reshape(C, d).T + w[C * d :]
    m = Z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(Z - m).sum(axis=1))
    return lse - Z[np.arange(n), y]


def ref_grad(name: str, w: np.ndarray, X: np.ndarray, y: np.ndarray, C: int, l2: float) -> np.ndarray:
    """Gradient of mean loss + 0.5*l2*||weights||^2 (no L2 on biases)."""
    X64 = X.astype(np.float64)
    n, d = X.shape
    g = np.zeros_like(w)
    if name == "logistic":
        z = X64 @ w[:d] + w[d]
        r = 1.0 / (1.0 + np.exp(-z)) - y
        g[:d] = X64.T @ r / n + l2 * w[:d]
        g[d] = r.mean()
        return g
    Z = X64 @ w[: C * d].reshape(C, d).T + w[C * d :]
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(n), y] -= 1.0
    g[: C * d] = (P.T @ X64 / n).ravel() + l2 * w[: C * d]
    g[C * d :] = P.mean(axis=0)
    return g


def n_weights(name: str, d: int, C: int) -> int:
    return d if name == "logistic" else C * d


def make_problem(name: str, n: int, d: int, C: int, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    model = get_model(name)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, C, n).astype(np.int32)
    w = scale * rng.standard_normal(model.n_params(d, C))
    return model, X, y, w


CASES = [("logistic", 2), ("softmax", 2), ("softmax", 5)]


@pytest.fixture(scope="module", autouse=True)
def _compile():
    for m in KERNELS.values():
        warmup(m)


# ---------------------------------------------------------------- gradients


def _step_gradient(model, w, X, y, idx, lr, l2, C):
    scratch = np.full(model.scratch_size(X.shape[1], C), np.nan)  # kernel must not rely on its contents
    w_after = w.copy()
    model.sgd_step(w_after, X, y, idx, lr, l2, C, scratch)
    return (w - w_after) / lr


@pytest.mark.parametrize("name,C", CASES)
def test_sgd_step_matches_finite_difference(name, C):
    d, l2, lr = 7, 0.3, 1e-3
    model, X, y, w = make_problem(name, 40, d, C, seed=1)
    idx = np.array([3, 17, 0, 17, 39, 8, 21, 5, 30, 11], dtype=np.int64)  # includes a duplicate
    g = _step_gradient(model, w, X, y, idx, lr, l2, C)

    Xb, yb = np.ascontiguousarray(X[idx]), y[idx]
    nw = n_weights(name, d, C)

    def objective(v):
        return model.loss_sum(v, Xb, yb, C) / len(idx) + 0.5 * l2 * np.dot(v[:nw], v[:nw])

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
def test_sgd_step_empty_batch_is_noop(name, C):
    model, X, y, w = make_problem(name, 10, 4, C, seed=4)
    w2 = w.copy()
    model.sgd_step(w2, X, y, np.zeros(0, np.int64), 0.5, 0.1, C, np.zeros(model.scratch_size(4, C)))
    np.testing.assert_array_equal(w, w2)


# ---------------------------------------------------------------- loss, predict, l2


@pytest.mark.parametrize("name,C", CASES)
def test_loss_sum_matches_reference(name, C):
    model, X, y, w = make_problem(name, 300, 9, C, seed=5)
    got = model.loss_sum(w, X, y, C)
    assert isinstance(got, float)
    np.testing.assert_allclose(got, ref_loss_vec(name, w, X, y, C).sum(), rtol=1e-10)
    # shard sums add up to the whole
    parts = model.loss_sum(w, X[:100], y[:100], C) + model.loss_sum(w, X[100:], y[100:], C)
    np.testing.assert_allclose(parts, got, rtol=1e-12)


@pytest.mark.parametrize("name,C", CASES)
def test_predict_matches_argmax(name, C):
    model, X, y, w = make_problem(name, 300, 9, C, seed=6)
    d = X.shape[1]
    got = model.predict(w, X, C)
    assert got.dtype == np.int32 and got.shape == (300,)
    X64 = X.astype(np.float64)
    if name == "logistic":
        z = X64 @ w[:d] + w[d]
        scores = np.stack([np.zeros_like(z), z], axis=1)
    else:
        scores = X64 @ w[: C * d].reshape(C, d).T + w[C * d :]
    np.testing.assert_array_equal(got, scores.argmax(axis=1))


@pytest.mark.parametrize("name,C", CASES)
def test_l2_penalty_excludes_biases(name, C):
    model, _, _, w = make_problem(name, 1, 6, C, seed=7)
    nw = n_weights(name, 6, C)
    assert l2_penalty(w, 6, C, 0.2) == pytest.approx(0.5 * 0.2 * np.sum(w[:nw] ** 2), rel=1e-12)
    w2 = w.copy()
    w2[nw:] = 123.0
    assert l2_penalty(w2, 6, C, 0.2) == pytest.approx(l2_penalty(w, 6, C, 0.2), rel=1e-12)


# ---------------------------------------------------------------- numerical stability


@pytest.mark.parametrize("name,C", CASES)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_huge_margins_stay_finite(name, C, sign):
    d = 4
    model = get_model(name)
    X = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [2, 0, 0, 0]], dtype=np.float32)
    y = np.array([1, 0, 1], dtype=np.int32)
    w = np.zeros(model.n_params(d, C))
    if name == "logistic":
        w[0], w[1] = sign * 1e4, -sign * 1e4  # margins +-1e4 and +-2e4
    else:
        w[1 * d + 0] = sign * 1e4  # feature 0 -> logit of class 1
        w[0 * d + 1] = sign * 1e4  # feature 1 -> logit of class 0
    loss = model.loss_sum(w, X, y, C)
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, ref_loss_vec(name, w, X, y, C).sum(), rtol=1e-12)
    if sign > 0:
        assert loss < 1e-12  # all samples classified with margin 1e4
    else:
        assert loss > 1e4  # confidently wrong: loss ~ margin, not inf
    w2 = w.copy()
    model.sgd_step(w2, X, y, np.arange(3, dtype=np.int64), 0.1, 0.01, C, np.zeros(model.scratch_size(d, C)))
    assert np.all(np.isfinite(w2))
    assert np.array_equal(model.predict(w, X, C)[:2], [1, 0] if sign > 0 else [0, 1])


# ---------------------------------------------------------------- behaviour: training


@pytest.mark.parametrize("name,C", CASES)
def test_training_reaches_high_accuracy(name, C):
    rng = np.random.default_rng(8)
    n, d = 2000, 20
    model = get_model(name)
    centers = 3.0 * rng.standard_normal((C, d))
    y = rng.integers(0, C, n).astype(np.int32)
    X = (centers[y] + rng.standard_normal((n, d))).astype(np.float32)
    w = np.zeros(model.n_params(d, C))
    scratch = np.zeros(model.scratch_size(d, C))
    loss0 = model.loss_sum(w, X, y, C) / n
    for _ in range(300):
        idx = rng.integers(0, n, 32).astype(np.int64)
        model.sgd_step(w, X, y, idx, 0.1, 1e-4, C, scratch)
    acc = np.mean(model.predict(w, X, C) == y)
    assert acc > 0.95
    assert model.loss_sum(w, X, y, C) / n < 0.5 * loss0


# ---------------------------------------------------------------- registry


def test_registry_and_unknown_model():
    assert set(KERNELS) == {"logistic", "softmax"}
    assert get_model("softmax") is KERNELS["softmax"]
    with pytest.raises(InputError, match=r"unknown model 'svmx'; choose from: logistic, softmax"):
        get_model("svmx")


def test_param_and_scratch_sizes():
    lg, sm = get_model("logistic"), get_model("softmax")
    assert (lg.min_classes, lg.max_classes) == (2, 2)
    assert (sm.min_classes, sm.max_classes) == (2, None)
    assert lg.n_params(10, 2) == 11
    assert sm.n_params(10, 3) == 33
    assert sm.n_params(1, 7) == 14
    assert lg.scratch_size(10, 2) >= 11
    assert sm.scratch_size(10, 3) >= 33


def test_bad_labels_raise():
    model, X, y, w = make_problem("softmax", 5, 3, 3, seed=9)
    y[2] = 3
    with pytest.raises(ValueError):
        model.loss_sum(w, X, y, 3)
    with pytest.raises(ValueError):
        model.sgd_step(w, X, y, np.arange(5, dtype=np.int64), 0.1, 0.0, 3, np.zeros(model.scratch_size(3, 3)))
    lmodel, X, y, w = make_problem("logistic", 5, 3, 2, seed=9)
    y[0] = 2
    with pytest.raises(ValueError):
        lmodel.loss_sum(w, X, y, 2)
