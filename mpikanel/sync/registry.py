"""The one list of sync models: the CLI, config validation, the simulator and the bench read it.

Each model is one module of this package holding its server policy, its worker schedule, the
options it reads (``OPTIONS``, :class:`mpikanel.sync.options.Option`) and a
``make(config, n_workers) -> (policy, schedule)`` reading them from the config.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import InputError
from .options import Option


@dataclass(frozen=True)
class SyncModel:
    """A registered sync model: its name, a one-line description and its module."""

    name: str
    summary: str
    module: str

    @property
    def options(self) -> tuple[Option, ...]:
        """The settings this model reads, as its module declares them."""
        return getattr(self._code(), "OPTIONS", ())

    def make(self, config: Any, n_workers: int) -> tuple[Any, Any]:
        """(server policy, worker schedule) for a config."""
        return self._code().make(config, n_workers)

    def _code(self) -> ModuleType:
        return importlib.import_module(f"{__package__}.{self.module}")


MODELS: dict[str, SyncModel] = {m.name: m for m in (
    SyncModel("bsp", "bulk synchronous: a barrier every step, bitwise reproducible", "bsp"),
    SyncModel("asp", "fully asynchronous", "asp"),
    SyncModel("ssp", "stale synchronous: at most --staleness pushes ahead of the slowest", "ssp"),
    SyncModel("esp", "efficient synchronous: workers skip exchanges that are not worth it now", "esp"),
    SyncModel("psp", "predicted synchronous: the server plans each worker's local steps per round", "psp"),
)}

#: the names, in the order help and tables show them
SYNC_MODELS: tuple[str, ...] = tuple(MODELS)

#: every model's options by name, each once (ESP shares SSP's staleness), in the order help shows them
OPTIONS: dict[str, Option] = {o.name: o for m in MODELS.values() for o in m.options}


def get(name: str) -> SyncModel:
    """The registered model of this name; InputError naming the choices otherwise."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise InputError(f"unknown --sync '{name}'; choose from: {', '.join(SYNC_MODELS)}") from None
