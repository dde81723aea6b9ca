"""The one list of sync models: the CLI, config validation, the simulator and the bench read it.

Each model is one module of this package holding its server policy, its worker schedule and a
``make(config, n_workers) -> (policy, schedule)`` reading its own options from the config.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import InputError


@dataclass(frozen=True)
class SyncModel:
    """A registered sync model: its name, a one-line description, its module and its options."""

    name: str
    summary: str
    module: str
    options: tuple[str, ...] = ()      # config fields only this model reads

    def make(self, config: Any, n_workers: int) -> tuple[Any, Any]:
        """(server policy, worker schedule) for a config."""
        return importlib.import_module(f"{__package__}.{self.module}").make(config, n_workers)


MODELS: dict[str, SyncModel] = {m.name: m for m in (
    SyncModel("bsp", "bulk synchronous: a barrier every step, bitwise reproducible", "bsp"),
    SyncModel("asp", "fully asynchronous", "asp"),
    SyncModel("ssp", "stale synchronous: at most --staleness pushes ahead of the slowest", "ssp",
              ("staleness",)),
    SyncModel("esp", "efficient synchronous: workers skip exchanges that are not worth it now", "esp",
              ("staleness", "esp_rho", "esp_max_skip", "esp_scale", "esp_probe", "esp_value", "esp_efficiency",
               "esp_value_high", "esp_lag")),
    SyncModel("psp", "predicted synchronous: the server plans each worker's local steps per round", "psp",
              ("psp_k_max", "psp_aggregate", "psp_wait")),
)}

#: the names, in the order help and tables show them
SYNC_MODELS: tuple[str, ...] = tuple(MODELS)


def get(name: str) -> SyncModel:
    """The registered model of this name; InputError naming the choices otherwise."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise InputError(f"unknown --sync '{name}'; choose from: {', '.join(SYNC_MODELS)}") from None
