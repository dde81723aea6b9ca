"""Linear SVM: one-vs-rest hinge loss on dense or CSR rows (like LinearSVC(loss='hinge')).

Layout: W^T as (d, C) row-major at w[:d*C] (w[j*C + c]), then biases b at w[d*C:]; kernels in _linear.
Per-sample loss: sum_c max(0, 1 - t_c z_c), t_c = +1 for the true class and -1 otherwise;
predict = argmax_c z_c (for 2 classes the two units mirror each other).
"""

from __future__ import annotations

from . import _linear

MODEL = _linear.linear_model("svm", _linear.HINGE, "linear SVM, one-vs-rest hinge loss")
