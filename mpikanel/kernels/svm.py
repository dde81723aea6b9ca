"""Linear SVM: one-vs-rest hinge loss on dense or CSR rows (like LinearSVC(loss='hinge')).

Layout: W^T as (d, C) row-major at w[:d*C] (w[j*C + c]), then biases b at w[d*C:]; kernels in _linear.
Per-sample loss: sum_c max(0, 1 - t_c z_c), t_c = +1 for the true class and -1 otherwise;
predict = argmax_c z_c (for 2 classes the two units mirror each other).
"""

from __future__ import annotations

from . import _linear
from .base import Model

KIND = _linear.HINGE
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
    name="svm",
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
    description="linear SVM (one-vs-rest hinge)",
)
