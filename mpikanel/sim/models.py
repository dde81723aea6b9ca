"""Where the simulator's time comes from: step times, links and the server as a queue.

Defaults are this project's measurements (shared/notes/measurements.md and docs/simulator.md):
MPICH shared-memory latency is a few microseconds, but an exchange through mpi4py, the frame
copy and the Python loop costs tens of microseconds each way, and the server spends about as
long per push in Python (decode, book, policy, reply) besides copying the bytes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class NetworkModel:
    """One-way message time = latency + bytes / bandwidth (plus any injected link delay)."""

    latency_s: float = 40e-6
    bandwidth: float = 3e9               # bytes per second per link

    def transfer_s(self, nbytes: int) -> float:
        """Seconds for one message of nbytes to cross a link."""
        return self.latency_s + nbytes / self.bandwidth


@dataclass(frozen=True)
class ServerModel:
    """The server as a FIFO queue: service per push = push_s + bytes / bandwidth (+ --server-delay);
    each reply sent costs bytes / bandwidth more."""

    push_s: float = 40e-6
    bandwidth: float = 5e9               # bytes per second the server applies and copies
    probe_s: float = 5e-6                # server seconds to answer one probe

    def push_service_s(self, nbytes: int) -> float:
        """Server seconds to take in and apply one push of nbytes."""
        return self.push_s + nbytes / self.bandwidth

    def reply_s(self, nbytes: int) -> float:
        """Server seconds to send one reply of nbytes."""
        return nbytes / self.bandwidth


def measure_step_s(step, rows: int, batch: int, repeats: int = 30, seed: int = 0) -> float:
    """Median wall seconds of one SGD step ``step(idx)`` on this machine (after a warm-up)."""
    rng = np.random.default_rng(seed)
    times = []
    for i in range(repeats + 3):
        idx = rng.choice(rows, size=min(batch, rows), replace=False).astype(np.int64)
        t0 = time.perf_counter()
        step(idx)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def step_times_from_metrics(path: str, n_workers: int) -> np.ndarray:
    """Per-worker realized seconds per step (compute + injected) of a real run's metrics file."""
    from ..metrics import read_metrics

    workers = read_metrics(path)["workers"]
    if len(workers) != n_workers:
        raise InputError(f"{path}: a run of {len(workers)} workers cannot be replayed with {n_workers}; "
                         f"use --workers {len(workers)}")
    out = np.array([(w["compute_s"] + w["injected_s"]) / max(1, w["steps"]) for w in workers])
    if not (out > 0).all():
        raise InputError(f"{path}: a worker with no measured steps cannot be replayed")
    return out
