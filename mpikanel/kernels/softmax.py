"""Multiclass softmax (multinomial logistic) regression on dense or CSR rows.

Layout: W^T as (d, C) row-major at w[:d*C] (w[j*C + c]), then biases b at w[d*C:]; kernels in _linear.
Per-sample loss: cross-entropy logsumexp(z) - z[y], z = W x + b (computed max-shifted: no overflow).
"""

from __future__ import annotations

from . import _linear

MODEL = _linear.linear_model("softmax", _linear.SOFTMAX, "multiclass softmax regression")
