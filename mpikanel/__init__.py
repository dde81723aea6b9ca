"""mpikanel: an MPI parameter server for distributed SGD with pluggable synchronization models.

``mpikanel.train.train(config, comm=None)`` trains collectively on an mpi4py communicator;
``python -m mpikanel.train`` is the command-line entry point; ``mpikanel.load_model(PATH)`` loads a model
saved with ``--save-model`` (no MPI needed).
"""
from __future__ import annotations

from typing import Any

from ._version import __version__
__all__ = ["__version__", "train", "TrainConfig", "make_config", "InputError", "TrainingError", "load_model"]

from .config import TrainConfig, make_config
from .errors import InputError, TrainingError


def __getattr__(name: str) -> Any:
    # Lazy: importing mpikanel must not initialize MPI; train imports mpi4py.
    if name == "train":
        import importlib
        return importlib.import_module(".train", __name__)
    if name == "load_model":          # lazy too: model files need h5py, not numba or MPI
        from .model_io import load_model
        return load_model
    raise AttributeError(f"module 'mpikanel' has no attribute {name!r}")
