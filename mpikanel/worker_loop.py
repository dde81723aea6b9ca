"""The MPI worker's driver: runs the worker core with real time and blocking MPI waits."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine.worker_core import (PROBE_WAIT, WAIT, BatchCursor, Compute, Exchanger, StepPlan,  # noqa: F401 - re-exported
                                 WorkerStats, worker_core)
from .hetero import Injector, sleep_for
from .kernels import BoundModel
from .sync.schedule import Schedule


@dataclass
class Pacer:
    """How long a real step lasts: the slowdown on its CPU time, or with `step_time` (--step-time)
    max(its compute, the injector's modeled step); sleeps the rest. Shared by every MPI driver
    (the parameter server's workers and the Allreduce baselines)."""

    injector: Injector
    batch_size: int
    step_time: float | None = None
    paced_s: float = 0.0          # the modeled steps' seconds (paced runs)
    missed: int = 0               # steps whose compute outlasted their modeled time (paced runs)

    def finish_step(self, wall_s: float, cpu_s: float, rows: int) -> tuple[float, float, float]:
        """Sleep what the step of `rows` rows still owes; (compute_s, slept_s, injected_s of the slept)."""
        if self.step_time is None:
            slow = self.injector.compute_delay(cpu_s)
            sleep_for(slow)
            return wall_s, slow, slow
        pace = self.injector.pace(wall_s, rows, self.batch_size, self.step_time)
        sleep_for(pace.sleep_s)
        self.paced_s += pace.modeled_s
        self.missed += not pace.held
        return pace.compute_s, pace.sleep_s, pace.injected_s


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
    pacer = Pacer(injector, plan.batch_size, step_time)
    answer = None
    while True:
        try:
            effect = core.send(answer)
        except StopIteration as done:
            local, stats = done.value
            stats.paced_s, stats.pacing_missed = pacer.paced_s, pacer.missed
            return local, stats
        if effect is WAIT:
            answer = client.wait()
        elif effect is PROBE_WAIT:
            answer = client.probe_wait()
        else:
            answer = pacer.finish_step(effect.wall_s, effect.cpu_s, effect.rows)
