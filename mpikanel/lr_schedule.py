"""Learning-rate schedules over the run's work budget, the same function for every sync model.

Pure: the rate of a step is a function of the base rate and of ``progress``, the fraction of the
work budget done when the step starts (0 at the start, 1 when the budget is spent). A worker
knows progress from the server's count in its last reply plus what it did since, so a lockstep
model (BSP) sees the same progress on every run and stays bitwise reproducible.
"""
from __future__ import annotations

import math

from .errors import InputError

SCHEDULES = ("constant", "linear", "cosine")


def check_schedule(schedule: str, warmup: float) -> None:
    """InputError (one line) unless the schedule and its warm-up share are valid."""
    if schedule not in SCHEDULES:
        raise InputError(f"--lr-schedule must be one of {', '.join(SCHEDULES)}, got '{schedule}'")
    if not 0.0 <= warmup < 1.0:
        raise InputError(f"--warmup must be a fraction of the budget in [0, 1), got {warmup}")


def scheduled_rate(lr: float, schedule: str, warmup: float, progress: float) -> float:
    """The rate at `progress` in [0, 1]: a linear ramp from 0 over the first `warmup` of the budget,
    then constant, or decaying linearly or along a half cosine to 0 at the budget's end."""
    p = min(1.0, max(0.0, progress))
    if p < warmup:
        return lr * p / warmup
    if schedule == "constant":
        return lr
    rest = (p - warmup) / (1.0 - warmup)
    if schedule == "linear":
        return lr * (1.0 - rest)
    return lr * 0.5 * (1.0 + math.cos(math.pi * rest))
