"""GradientModel and the JAX adapter in-process: the step rule, losses and predictions over blocks,
the factory spec's errors, and the adapter's gradient against finite differences."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from mpikanel.errors import InputError
from mpikanel.kernels import bind
from mpikanel.models import GradientModel, model_from_spec, parse_shape
from mpikanel.models.spec import absolute_spec, split_spec

HERE = Path(__file__).parent
LOGISTIC = f"py:{HERE / 'models' / 'np_logistic.py'}:make"
EXAMPLE = HERE.parent / "examples" / "jax_cnn.py"
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="JAX is not installed (pip install -e '.[jax]')")


def _data(n=40, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int32)


def test_step_is_w_minus_lr_times_grad_plus_l2_w():
    X, y = _data()
    gm = model_from_spec(LOGISTIC, X.shape[1], 2)
    model = gm.as_model(LOGISTIC, X.shape[1], 2)
    bound = bind(model, X, y, 2)
    w = np.random.default_rng(1).normal(size=model.n_params(6, 2))
    idx = np.array([3, 1, 7, 7, 20], dtype=np.int64)
    g, _ = gm.grad(w, X[idx], y[idx])
    expected = w - 0.3 * (g + 0.01 * w)
    bound.step(w, idx, 0.3, 0.01, bound.scratch())
    np.testing.assert_array_equal(w, expected)


@pytest.mark.parametrize("as_type", [np.float16, np.float32, list])
def test_step_takes_a_gradient_of_any_float_dtype_and_refuses_a_wrong_size(as_type):
    X, y = _data()
    n = 7
    g = np.linspace(-1.0, 1.0, n)
    gm = GradientModel(np.zeros(n), lambda w, X, y: (g.astype(as_type) if as_type is not list else list(g), 0.0),
                       lambda w, X, y: 0.0, lambda w, X: np.zeros(len(X), dtype=np.int32))
    bound = bind(gm.as_model("g", X.shape[1], 2), X, y, 2)
    w = np.ones(n)
    bound.step(w, np.arange(4), 0.5, 0.0, bound.scratch())
    expected = 1.0 - 0.5 * (g if as_type is list else g.astype(as_type).astype(np.float64))
    np.testing.assert_allclose(w, expected, rtol=1e-15)
    short = GradientModel(np.zeros(n), lambda w, X, y: (np.zeros(n - 1), 0.0), lambda w, X, y: 0.0,
                          lambda w, X: np.zeros(len(X), dtype=np.int32))
    bound = bind(short.as_model("s", X.shape[1], 2), X, y, 2)
    with pytest.raises(ValueError, match="the gradient has 6 entries, the parameters 7"):
        bound.step(w, np.arange(4), 0.5, 0.0, bound.scratch())


def test_loss_sum_and_predictions_cover_every_row_in_blocks():
    X, y = _data(n=2500)
    gm = model_from_spec(LOGISTIC, X.shape[1], 2)
    model = gm.as_model(LOGISTIC, X.shape[1], 2)
    bound = bind(model, X, y, 2)
    w = np.random.default_rng(2).normal(size=7)
    assert bound.loss_sum(w) == pytest.approx(gm.loss(w, X, y) * len(y), rel=1e-12)
    pred = bound.predict(w)
    assert pred.dtype == np.int32 and pred.shape == (2500,)
    np.testing.assert_array_equal(pred, gm.predict(w, X))
    assert bound.correct(w) == int((gm.predict(w, X) == y).sum())


def test_input_shape_reshapes_rows_before_the_model_sees_them():
    seen = []

    def grad(w, X, y):
        seen.append(X.shape)
        return np.zeros_like(w), 0.0

    gm = GradientModel(np.zeros(3), grad, lambda w, X, y: 0.0, lambda w, X: np.zeros(len(X), np.int32))
    model = gm.as_model("py:x.py:f", 12, 2, (3, 2, 2))
    bound = bind(model, np.zeros((5, 12), np.float32), np.zeros(5, np.int32), 2)
    bound.step(np.zeros(3), np.arange(4, dtype=np.int64), 0.1, 0.0, bound.scratch())
    assert seen == [(4, 3, 2, 2)]


def test_callable_init_draws_from_the_run_seed():
    gm = model_from_spec(LOGISTIC, 6, 2)
    a = gm.initial(6, 2, np.random.default_rng([0, 12345]))
    b = gm.initial(6, 2, np.random.default_rng([0, 12345]))
    c = gm.initial(6, 2, np.random.default_rng([1, 12345]))
    assert a.dtype == np.float64 and a.shape == (7,)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("spec, needle", [
    ("py:nowhere/none.py:make", "no such file nowhere/none.py"),
    (f"py:{HERE / 'models' / 'np_logistic.py'}:absent", "has no function absent"),
    (f"py:{HERE / 'models' / 'np_logistic.py'}:broken", "raised RuntimeError: this factory always fails"),
    (f"py:{HERE / 'models' / 'np_logistic.py'}:not_a_model", "returned int, not a GradientModel"),
    ("py:justafile.py", "expected py:FILE.py:FACTORY"),
])
def test_factory_errors_are_one_line_input_errors(spec, needle):
    with pytest.raises(InputError) as err:
        model_from_spec(spec, 6, 2)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_spec_and_shape_parsing():
    assert split_spec("py:a/b:c.py:make") == ("a/b:c.py", "make")
    assert absolute_spec("py:x.py:f") == f"py:{Path('x.py').resolve()}:f"
    assert parse_shape("1,28,28") == (1, 28, 28) and parse_shape(None) is None
    for bad in ("1,x", "0,3", ","):
        with pytest.raises(InputError, match="--input-shape"):
            parse_shape(bad)


def _tiny_jax_model(traces: list | None = None, **options):
    import jax.numpy as jnp

    from mpikanel.models import JaxModel

    rng = np.random.default_rng(0)
    params = {"a": {"w": rng.normal(0, 0.5, (5, 4)).astype(np.float32), "b": rng.normal(0, 0.1, 4).astype(np.float32)},
              "out": {"w": rng.normal(0, 0.5, (4, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}}

    def apply(p, X):
        if traces is not None:
            traces.append(X.shape[0])       # Python runs here only while JAX traces, once per compile
        h = jnp.tanh(X @ p["a"]["w"] + p["a"]["b"])
        return h @ p["out"]["w"] + p["out"]["b"]

    def loss(z, y):
        z = z - z.max(axis=1, keepdims=True)
        return jnp.mean(jnp.log(jnp.exp(z).sum(axis=1)) - jnp.take_along_axis(z, y[:, None], axis=1)[:, 0])

    return JaxModel(apply, params, loss, **options), params


@needs_jax
def test_jax_short_batches_reuse_the_longest_length_and_give_what_unpadded_rows_give():
    # a shard's last batch and an evaluation's last block are shorter: padded, they reuse one compile
    traces, plain_traces = [], []
    gm, _ = _tiny_jax_model(traces)
    plain, _ = _tiny_jax_model(plain_traces, pad_rows=False)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(16, 5)).astype(np.float32)
    y = rng.integers(0, 3, 16).astype(np.int32)
    w = gm.initial(5, 3, rng)
    for rows in (16, 4, 12):
        np.testing.assert_allclose(gm.step_gradient(w, X[:rows], y[:rows]), plain.step_gradient(w, X[:rows], y[:rows]),
                                   rtol=1e-5, atol=1e-6)
    assert traces == [16, 16] and plain_traces == [16, 4, 12]    # full batches unmasked, short ones padded
    for rows in (16, 5):
        value, classes = gm.evaluate(w, X[:rows], y[:rows])
        plain_value, plain_classes = plain.evaluate(w, X[:rows], y[:rows])
        assert value == pytest.approx(plain_value, rel=1e-5) and len(classes) == rows
        np.testing.assert_array_equal(classes, plain_classes)
        np.testing.assert_array_equal(gm.predict(w, X[:rows]), plain.predict(w, X[:rows]))
        g, value = gm.grad(w, X[:rows], y[:rows])
        assert value == pytest.approx(plain.loss(w, X[:rows], y[:rows]), rel=1e-5)


@needs_jax
def test_jax_gradient_equals_finite_differences():
    gm, params = _tiny_jax_model()
    rng = np.random.default_rng(3)
    X = rng.normal(size=(16, 5)).astype(np.float32)
    y = rng.integers(0, 3, 16).astype(np.int32)
    w = gm.initial(5, 3, rng)
    assert w.size == 5 * 4 + 4 + 4 * 3 + 3 == gm.n_params
    g, value = gm.grad(w, X, y)
    assert value == pytest.approx(gm.loss(w, X, y), rel=1e-6)
    np.testing.assert_allclose(gm.step_gradient(w, X, y), g, rtol=1e-6, atol=1e-7)
    eps = 1e-2
    fd = np.empty_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = eps
        fd[j] = (gm.loss(w + e, X, y) - gm.loss(w - e, X, y)) / (2 * eps)
    np.testing.assert_allclose(g, fd, atol=2e-3 * np.abs(fd).max())


@needs_jax
def test_jax_flat_layout_is_the_pytree_flattened_once():
    gm, params = _tiny_jax_model()
    w = gm.initial(5, 3, np.random.default_rng(0))
    tree = gm.params_tree(w)
    np.testing.assert_array_equal(np.asarray(tree["a"]["w"]), params["a"]["w"])
    np.testing.assert_array_equal(np.asarray(tree["out"]["b"]), params["out"]["b"])


@needs_jax
def test_example_cnn_has_over_100k_parameters_and_learns_a_batch():
    spec = f"py:{EXAMPLE}:make_model"
    gm = model_from_spec(spec, 784, 10, (1, 28, 28))
    model = gm.as_model(spec, 784, 10, (1, 28, 28))
    assert model.n_params(784, 10) >= 100_000
    rng = np.random.default_rng(0)
    X = rng.random((32, 784), dtype=np.float32)
    y = rng.integers(0, 10, 32).astype(np.int32)
    bound = bind(model, X, y, 10)
    w = model.init(0, 784, 10, rng)
    before = bound.loss_sum(w)
    for _ in range(20):
        bound.step(w, np.arange(32, dtype=np.int64), 0.05, 0.0, bound.scratch())
    assert bound.loss_sum(w) < 0.8 * before          # memorizing 32 random labels: 77 -> 53


def test_correct_after_loss_sum_reuses_the_forward_pass_only_for_the_same_parameters():
    calls = []
    X, y = _data(n=30)
    base = model_from_spec(LOGISTIC, 6, 2)

    def predict(w, Xb):
        calls.append(len(Xb))
        return base.predict(w, Xb)

    gm = GradientModel(base.init, base.grad, base.loss, predict)
    bound = bind(gm.as_model("py:x.py:f", 6, 2), X, y, 2)
    w = np.random.default_rng(4).normal(size=7)
    bound.loss_sum(w)
    assert bound.correct(w) == int((base.predict(w, X) == y).sum()) and calls == [30]
    w[0] += 1.0                                        # changed in place: evaluated again
    assert bound.correct(w) == int((base.predict(w, X) == y).sum()) and calls == [30, 30]
