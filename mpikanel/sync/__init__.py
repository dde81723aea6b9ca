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
           "SYNC_MODELS", "Schedule", "SyncModel", "SyncPolicy", "WorkerState", "get"]

