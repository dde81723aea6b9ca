"""Models beyond the numba kernels: plain Python gradients (GradientModel) and a JAX adapter (JaxModel).

``--model py:FILE.py:FACTORY`` trains what FACTORY(n_features, n_classes, input_shape) returns.
The JAX adapter needs the optional extra ``pip install 'mpikanel[jax]'``; it is imported lazily.
"""
from __future__ import annotations

from typing import Any

from .gradient import GradientModel
from .spec import is_spec, load_factory, model_from_spec, parse_shape, preload_factory

__all__ = ["GradientModel", "JaxModel", "is_spec", "load_factory", "model_from_spec", "parse_shape", "preload_factory"]


def __getattr__(name: str) -> Any:
    if name == "JaxModel":
        from .jax_adapter import JaxModel

        return JaxModel
    raise AttributeError(name)
