"""The curve's BLAS evaluation of many snapshots matches the kernels' loss and accuracy."""
import numpy as np
import pytest

from mpikanel.evaluate import snapshot_metrics
from mpikanel.kernels import CSR, bind, get_model


@pytest.mark.parametrize("name,classes,activation", [("logistic", 2, "relu"), ("softmax", 4, "relu"),
                                                      ("svm", 4, "relu"), ("lsq", 4, "relu"), ("mlp", 4, "relu"),
                                                      ("mlp", 4, "tanh")])
def test_blas_curve_matches_the_kernels(name, classes, activation):
    model = get_model(name, hidden=6, activation=activation)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 9)).astype(np.float32)
    y = rng.integers(0, classes, 500).astype(np.int32)
    bound = bind(model, X, y, classes)
    params = [rng.normal(scale=0.5, size=model.n_params(9, classes)) for _ in range(20)]   # > one BLOCK
    losses, accs = snapshot_metrics(name, X, y, classes, params, hidden=6, activation=activation)
    for p, loss, acc in zip(params, losses, accs):
        assert loss == pytest.approx(bound.loss_sum(p) / 500, rel=1e-5)
        assert acc == pytest.approx(bound.correct(p) / 500, abs=2 / 500)     # a float32 tie may flip a row


def test_unsupported_inputs_fall_back():
    X = np.ones((4, 3), dtype=np.float32)
    y = np.zeros(4, dtype=np.int32)
    assert snapshot_metrics("custom-thing", X, y, 2, [np.zeros(8)]) is None
    assert snapshot_metrics("softmax", CSR.from_dense(X), y, 2, [np.zeros(8)]) is None
