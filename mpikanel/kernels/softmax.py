"""Multiclass softmax (multinomial logistic) regression on dense or CSR rows.

Layout: W^T as (d, C) row-major at w[:d*C] (w[j*C + c]), then biases b at w[d*C:]; kernels in _linear.
Per-sample loss: cross-entropy logsumexp(z) - z[y], z = W x + b (computed max-shifted: no overflow).
"""

from __future__ import annotations

from . import _linear
from .base import Model

KIND = _linear.SOFTMAX
n_params = _linear.multi_n_params
scratch_size = _linear.multi_scratch_size


def sgd_step(w, X, y, idx, lr, l2, n_classes, scratch):
    """One minibatch SGD step in place on dense rows."""
    _linear.dense_step(w, X, y, idx, lr, l2, n_classes, scratch, KIND)


def loss_sum(w, X, y, n_classes):
    """Sum over all dense rows of the loss (no L2 term)."""
    return _linear.dense_loss(w, X, y, n_classes, KIND)


def predict(w, X, n_classes):
    """Predicted class per dense row: argmax of the C scores."""
    return _linear.dense_predict(w, X, n_classes, KIND)


def sgd_step_csr(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch):
    """One minibatch SGD step in place on CSR rows."""
    _linear.csr_step(w, indptr, indices, data, d, y, idx, lr, l2, n_classes, scratch, KIND)


def loss_sum_csr(w, indptr, indices, data, d, y, n_classes):
    """Sum over all CSR rows of the loss (no L2 term)."""
    return _linear.csr_loss(w, indptr, indices, data, d, y, n_classes, KIND)


def predict_csr(w, indptr, indices, data, d, n_classes):
    """Predicted class per CSR row."""
    return _linear.csr_predict(w, indptr, indices, data, d, n_classes, KIND)


MODEL = Model(
    name="softmax",
    min_classes=2,
    max_classes=None,
    n_params=n_params,
    scratch_size=scratch_size,
    sgd_step=sgd_step,
    loss_sum=loss_sum,
    predict=predict,
    sgd_step_csr=sgd_step_csr,
    loss_sum_csr=loss_sum_csr,
    predict_csr=predict_csr,
    description="multiclass softmax regression",
)
