"""The progress bar rank 0 draws while the server runs (tqdm, on a terminal only)."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from .config import TrainConfig


def show_progress(mode: str) -> bool:
    """Whether rank 0 draws a progress bar (its stderr is a pipe under mpiexec even on a terminal)."""
    if mode != "auto":
        return mode == "on"
    if sys.stderr.isatty():
        return True
    env = os.environ
    interactive = env.get("TERM", "dumb") != "dumb"
    return interactive and not any(k in env for k in ("CI", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"))


class Progress:
    """tqdm progress on rank 0 when stderr is a terminal; a no-op otherwise."""

    def __init__(self, total: int, config: TrainConfig) -> None:
        self.bar = None
        if not config.quiet and show_progress(config.progress):
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="step", desc=f"{config.sync} {config.model}",
                            mininterval=0.5, file=sys.stderr)
        self.last = 0

    def __enter__(self) -> Callable[[Any], None] | None:
        return self.update if self.bar is not None else None

    def update(self, stats: Any) -> None:
        steps, pushes = int(stats.steps.sum()), int(stats.pushes.sum())
        if steps - self.last >= max(1, self.bar.total // 200):
            self.bar.update(steps - self.last)
            self.last = steps
            # steps that did not get their own push: skips (ESP) or local steps (PSP)
            self.bar.set_postfix(pushes=pushes, skip_rate=f"{max(0.0, 1 - pushes / max(steps, 1)):.0%}", refresh=False)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            if exc[0] is None:
                self.bar.update(self.bar.total - self.last)
            self.bar.close()

