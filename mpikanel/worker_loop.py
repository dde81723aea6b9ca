"""The MPI worker's driver: runs the worker core with real time and blocking MPI waits."""
from __future__ import annotations

import numpy as np

from .engine.worker_core import (PROBE_WAIT, WAIT, BatchCursor, Compute, Exchanger, StepPlan,  # noqa: F401 - re-exported
                                 WorkerStats, worker_core)
from .hetero import Injector, sleep_for
from .kernels import BoundModel
from .sync.schedule import Schedule


def run_worker(client: Exchanger, data: BoundModel, params: np.ndarray, plan: StepPlan,
               rng: np.random.Generator, rank: int, injector: Injector,
               schedule: Schedule | None = None, resume: dict | None = None) -> tuple[np.ndarray, WorkerStats]:
    """Train on the bound shard (see worker_core); returns the last local parameters and stats.

    The injected slowdown scales the step's CPU time, not its wall time: on an oversubscribed
    node wall time includes waiting for a core, and scaling that would amplify contention.
    """
    core = worker_core(client, data, params, plan, rng, rank, injector, schedule, resume)
    answer = None
    while True:
        try:
            effect = core.send(answer)
        except StopIteration as done:
            return done.value
        if effect is WAIT:
            answer = client.wait()
        elif effect is PROBE_WAIT:
            answer = client.probe_wait()
        else:
            slow = injector.compute_delay(effect.cpu_s)
            sleep_for(slow)
            answer = (effect.wall_s, slow)
