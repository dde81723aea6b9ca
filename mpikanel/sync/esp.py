"""ESP, efficient synchronous parallel: each worker judges whether talking to the server is worth
it now and otherwise trains on (its skipped work accumulates and is pushed later); the server
bounds how far pushes run ahead with SSP's staleness bound."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .book import Book
from .schedule import Action, Schedule, WorkerState
from .ssp import SSP

SCALES = ("none", "inverse")


class ESP(SSP):
    """Efficient synchronous parallel, server side: SSP's staleness bound over push clocks.

    Workers decide themselves when to communicate (mpikanel.schedule.EspSchedule); the server
    bounds how far a worker's pushes may run ahead of the slowest active worker and can scale
    a stale delta by 1/(1+tau), tau = versions applied since the worker's base.
    """

    name = "esp"
    SCALES = SCALES

    def __init__(self, staleness: float, scale: str = "none") -> None:
        super().__init__(staleness)
        if scale not in self.SCALES:
            raise InputError(f"--esp-scale must be one of {', '.join(self.SCALES)}, got '{scale}'")
        self.scale = scale

    def delta_scale(self, book: Book, w: int) -> float:
        if self.scale == "none":
            return 1.0
        return 1.0 / (1.0 + max(0, book.version - int(book.base_version[w])))

    def describe(self) -> str:
        return "ESP" + super().describe()[3:]


@dataclass
class EspSchedule(Schedule):
    """Efficient synchronous parallel: communicate only when it is worth it now.

    Push (non-blocking) when the measured exchange cost is at most ``rho`` times the compute
    the push carries and the server is not congested; otherwise skip and keep training. The
    delta keeps accumulating, so skipped work is pushed later. Guards: after ``max_skip``
    consecutive skips the worker pushes and blocks; an exchange still in flight after
    ``max_skip`` further steps is waited for.
    """

    rho: float = 1.0
    max_skip: int = 8
    busy_max: int = 4
    name = "esp"
    forces_syncs = True

    def efficient(self, st: WorkerState) -> bool:
        """Whether an exchange now is cheap relative to the local work it carries."""
        if st.rtt_ewma is None:
            return True                  # nothing measured yet: communicate to measure
        return st.rtt_ewma <= self.rho * st.unsent_compute_s and st.busy <= self.busy_max

    def decide(self, st: WorkerState) -> Action:
        if st.pending:
            return Action.WAIT if st.steps_while_pending >= self.max_skip else Action.CONTINUE
        if self.efficient(st):
            return Action.PUSH
        if st.skips >= self.max_skip:
            return Action.PUSH_AND_WAIT  # forced sync keeps staleness bounded
        return Action.CONTINUE


def make(config, n_workers: int) -> tuple[ESP, EspSchedule]:
    """ESP's server policy and worker schedule for a config."""
    busy_max = config.esp_busy_max if config.esp_busy_max is not None else max(2, n_workers // 2)
    return (ESP(config.staleness, config.esp_scale),
            EspSchedule(rho=config.esp_rho, max_skip=config.esp_max_skip, busy_max=busy_max))
