"""``--model py:FILE.py:FACTORY``: a model from a user's Python file, FACTORY(n_features, n_classes, input_shape)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from ..errors import InputError
from .gradient import GradientModel

PREFIX = "py:"
_MODULES: dict[str, ModuleType] = {}
_BUILT: dict[tuple, GradientModel] = {}


def is_spec(name: str) -> bool:
    """True when a model name is a ``py:FILE:FACTORY`` spec."""
    return isinstance(name, str) and name.startswith(PREFIX)


def split_spec(spec: str) -> tuple[str, str]:
    """(FILE, FACTORY) of a ``py:FILE:FACTORY`` spec; InputError when it has not that form."""
    body = spec[len(PREFIX):] if is_spec(spec) else spec
    path, sep, factory = body.rpartition(":")
    if not sep or not path or not factory.isidentifier():
        raise InputError(f"--model {spec}: expected py:FILE.py:FACTORY (FACTORY a function name in FILE.py)")
    return path, factory


def absolute_spec(spec: str) -> str:
    """The spec with its file made absolute (what a model file records, so it loads from any directory)."""
    path, factory = split_spec(spec)
    return f"{PREFIX}{Path(path).resolve()}:{factory}"


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """``C,H,W`` -> (C, H, W) of positive ints; None for None or empty."""
    if text is None or str(text).strip() == "":
        return None
    try:
        shape = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise InputError(f"--input-shape must be positive integers separated by commas (e.g. 1,28,28), got '{text}'")
    return shape


def limit_threads(n: int) -> None:
    """Environment for framework thread pools started after this (XLA reads it when JAX starts)."""
    if "jax" not in sys.modules and "XLA_FLAGS" not in os.environ:
        multi = "true" if n > 1 else "false"
        os.environ["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen={multi} intra_op_parallelism_threads={n}"


def load_factory(spec: str) -> Callable[..., Any]:
    """Import FILE of a ``py:FILE:FACTORY`` spec (once per process) and return its FACTORY."""
    path, factory = split_spec(spec)
    p = Path(path).resolve()
    if not p.is_file():
        raise InputError(f"--model {spec}: no such file {path}")
    module = _MODULES.get(str(p))
    if module is None:
        name = f"mpikanel_user_{p.stem}_{hashlib.sha1(str(p).encode()).hexdigest()[:8]}"
        loader = importlib.util.spec_from_file_location(name, p)
        if loader is None or loader.loader is None:
            raise InputError(f"--model {spec}: {path} is not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001  the user's file: any error becomes one line
            sys.modules.pop(name, None)
            hint = ""
            if isinstance(exc, ModuleNotFoundError) and exc.name in ("jax", "jaxlib"):
                hint = " (pip install 'mpikanel[jax]')"
            raise InputError(f"--model {spec}: importing {path} failed: {_one_line(exc)}{hint}") from None
        _MODULES[str(p)] = module
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise InputError(f"--model {spec}: {path} has no function {factory}")
    return fn


def preload_factory(spec: str, threads: int = 1) -> None:
    """Import FILE of a ``py:FILE:FACTORY`` spec ahead of building its model (a framework's import
    takes seconds: ranks do it at once, not one after another); InputError as load_factory."""
    limit_threads(threads)
    load_factory(spec)


def model_from_spec(spec: str, n_features: int, n_classes: int, input_shape: tuple[int, ...] | None = None,
                    threads: int = 1) -> GradientModel:
    """The GradientModel FACTORY(n_features, n_classes, input_shape) returns (built once per process and arguments)."""
    key = (absolute_spec(spec), int(n_features), int(n_classes), input_shape)
    if key in _BUILT:
        return _BUILT[key]
    limit_threads(threads)
    fn = load_factory(spec)
    try:
        gm = fn(int(n_features), int(n_classes), input_shape)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"--model {spec}: {split_spec(spec)[1]}({n_features}, {n_classes}, {input_shape}) "
                         f"raised {_one_line(exc)}") from None
    if not isinstance(gm, GradientModel):
        raise InputError(f"--model {spec}: {split_spec(spec)[1]} returned {type(gm).__name__}, "
                         "not a GradientModel (or JaxModel)")
    gm.set_threads(threads)
    _BUILT[key] = gm
    return gm


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
