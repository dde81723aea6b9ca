"""The synchronization models: the product. One module per model (bsp, asp, ssp, esp, psp), each
with its server policy, its worker schedule and its options; ``registry`` lists them.

Pure code: no MPI and no clock reads; the server and the workers pass time in.
"""
from __future__ import annotations

from .asp import ASP
from .book import Book
from .bsp import BSP
from .esp import ESP, EspSchedule
from .policy import SyncPolicy
from .psp import PSP, PspSchedule
from .registry import MODELS, SYNC_MODELS, SyncModel, get
from .schedule import Action, Schedule, WorkerState
from .ssp import SSP

__all__ = ["ASP", "BSP", "ESP", "PSP", "SSP", "Action", "Book", "EspSchedule", "MODELS", "PspSchedule",
           "SYNC_MODELS", "Schedule", "SyncModel", "SyncPolicy", "WorkerState", "get", "make_policy"]


def make_policy(sync: str, staleness: float = 3, esp_scale: str = "none", n_workers: int = 1,
                psp_k_max: int = 8, psp_aggregate: str = "sum") -> SyncPolicy:
    """The server-side policy of a sync model with these options (defaults as the CLI's)."""
    from ..config import make_config

    options = make_config(sync=get(sync).name, staleness=staleness, esp_scale=esp_scale, psp_k_max=psp_k_max,
                          psp_aggregate=psp_aggregate)
    return get(sync).make(options, n_workers)[0]
