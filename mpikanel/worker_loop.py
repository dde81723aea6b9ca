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
               schedule: Schedule | None = None, resume: dict | None = None,
               step_time: float | None = None) -> tuple[np.ndarray, WorkerStats]:
    """Train on the bound shard (see worker_core); returns the last local parameters and stats.

    The injected slowdown scales the step's CPU time, not its wall time: on an oversubscribed
    node wall time includes waiting for a core, and scaling that would amplify contention.
    With `step_time` (--step-time) every step lasts max(its compute, the simulator's modeled
    step) instead, the rest slept: an accelerator-bound worker whose CPU mostly waits.
    """
    core = worker_core(client, data, params, plan, rng, rank, injector, schedule, resume)
    answer = None
    paced_s, missed = 0.0, 0
    while True:
        try:
            effect = core.send(answer)
        except StopIteration as done:
            local, stats = done.value
            stats.paced_s, stats.pacing_missed = paced_s, missed
            return local, stats
        if effect is WAIT:
            answer = client.wait()
        elif effect is PROBE_WAIT:
            answer = client.probe_wait()
        elif step_time is not None:
            pace = injector.pace(effect.wall_s, effect.rows, plan.batch_size, step_time)
            sleep_for(pace.sleep_s)
            paced_s += pace.modeled_s
            missed += not pace.held
            answer = (pace.compute_s, pace.sleep_s, pace.injected_s)
        else:
            slow = injector.compute_delay(effect.cpu_s)
            sleep_for(slow)
            answer = (effect.wall_s, slow)
