"""mpikanel.layout: the one decoder of the flat parameter vector agrees with the models' sizes."""
import numpy as np
import pytest

from mpikanel import layout
from mpikanel.kernels import get_model


@pytest.mark.parametrize("d,C,H", [(1, 2, 1), (7, 3, 5), (20, 10, 64)])
def test_mlp_views_cover_the_vector_in_order(d, C, H):
    w = np.arange(get_model("mlp").with_hyper(hidden=H).n_params(d, C), dtype=np.float64)
    assert layout.mlp_hidden(w.size, d, C) == H and layout.mlp_hidden(w.size + 1, d, C) == -1
    W1, W2, b1, b2 = layout.mlp_views(w, d, C)
    assert (W1.shape, W2.shape, b1.shape, b2.shape) == ((d, H), (C, H), (H,), (C,))
    assert np.array_equal(np.concatenate([W1.ravel(), W2.ravel(), b1, b2]), w) and np.shares_memory(W1, w)
    with pytest.raises(ValueError, match="not an MLP layout"):
        layout.mlp_views(w[:-1], d, C)


@pytest.mark.parametrize("model,C", [("logistic", 2), ("softmax", 4), ("svm", 3), ("lsq", 5)])
def test_linear_views_match_the_model_sizes(model, C):
    d = 6
    w = np.arange(get_model(model).n_params(d, C), dtype=np.float64)
    U = layout.units_of(model, C)
    assert layout.linear_units(w.size, d) == U and layout.linear_n_weights(w.size, d) == d * U
    W, b = layout.linear_views(w, d, U)
    assert W.shape == (d, U) and np.array_equal(W.ravel(), w[:d * U]) and np.array_equal(b, w[d * U:])
    rows, rest = layout.feature_rows(w, d)
    assert np.array_equal(rows, W) and np.array_equal(rest, b)
    with pytest.raises(ValueError, match="not a linear layout"):
        layout.linear_views(w[:-1], d, U)
    with pytest.raises(ValueError, match="not a linear layout"):
        layout.linear_units(w.size + 1, d)
