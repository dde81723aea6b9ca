"""Least squares / ridge regression, one-vs-rest on one-hot targets, as a classifier.

Layout: W^T as (d, C) row-major at w[:d*C] (w[j*C + c]), then biases b at w[d*C:]; kernels in _linear.
Per-sample loss: 0.5 * sum_c (z_c - [c == y])^2 (with --l2 this is ridge regression of the one-hot
targets, like sklearn Ridge on one-hot y); predict = argmax_c z_c.
"""

from __future__ import annotations

from . import _linear

MODEL = _linear.linear_model("lsq", _linear.SQUARED, "least squares / ridge (one-vs-rest, one-hot targets)")
