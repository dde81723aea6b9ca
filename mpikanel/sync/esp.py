"""ESP, efficient synchronous parallel: each worker judges whether talking to the server is worth
it now and otherwise trains on (its skipped work accumulates and is pushed later); the server
bounds how far pushes run ahead with SSP's staleness bound."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..hetero import uniform_draw
from .book import Book
from .damping import inverse_scale
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
        return inverse_scale(book.version - int(book.base_version[w]))

    def describe(self) -> str:
        return "ESP" + super().describe()[3:]


#: the seeded stream of each worker's max-skip jitter (hetero.uniform_draw)
JITTER_STREAM = 0xE5B


def jittered_max_skip(max_skip: int, seed: int, rank: int) -> int:
    """This worker's consecutive-skip bound: uniform in [max_skip - max_skip // 2, max_skip] from
    (seed, rank), so forced syncs of different workers do not line up; never above max_skip."""
    span = max_skip // 2 + 1
    return max_skip - min(span - 1, int(uniform_draw(seed, rank, 0, JITTER_STREAM) * span))


@dataclass
class EspSchedule(Schedule):
    """Efficient synchronous parallel: communicate only when it is worth it now.

    At a step boundary with nothing in flight the worker pushes (non-blocking) or skips and
    trains on; skipped work stays in the unsent delta and goes with a later push. In order:

    1. forced sync: after ``st.max_skip`` consecutive skips (``max_skip`` jittered per worker),
       push and block; an exchange still in flight after ``st.max_skip`` further steps is
       waited for. This bounds staleness as in SSP;
    2. ``efficiency`` off (ablation): push;
    3. value (``value`` on, once the server has reported its update norm): v = |unsent delta| /
       (the server's recent norm of one applied delta per local step), i.e. how many typical
       steps' worth of change the worker holds. v >= ``value_high``: push even when dear (it has
       drifted far); v < ``value_low``: skip, reason "value" (little to say even when cheap);
    4. congestion: skip, reason "busy", when more than ``busy_max`` pushes are queued at the
       server (the last probe's count; without probes the last reply's);
    5. cost: push when cost <= ``rho`` x the compute seconds the push carries, else skip, reason
       "cost". With probes, cost = probe round trip + queued x the server's seconds per push +
       what a push adds to a probe's round trip (EWMA), and at least the compute time already
       spent waiting for a probe still in flight; without (ablation), the EWMA of past push round
       trips net of the time the sync policy held them. Nothing measured yet: push.

    After a skip the worker sends a probe (``probe`` on) if none is in flight, so the next
    boundary decides on a fresh answer; before a push it takes the probe's answer first.
    """

    rho: float = 1.0
    max_skip: int = 8
    busy_max: int = 4
    probe: bool = True
    value: bool = True
    efficiency: bool = True
    value_low: float = 0.25
    value_high: float = 4.0
    name = "esp"
    forces_syncs = True

    @property
    def uses_probes(self) -> bool:  # type: ignore[override]
        return self.probe and self.efficiency

    @property
    def needs_norm(self) -> bool:  # type: ignore[override]
        return self.value and self.efficiency

    def setup(self, st: WorkerState, rank: int, seed: int) -> None:
        st.max_skip = jittered_max_skip(self.max_skip, seed, rank)

    def cost(self, st: WorkerState) -> float | None:
        """Estimated seconds a push would take now (None before anything was measured)."""
        if self.uses_probes and st.probe_rtt_s is not None:
            now = st.probe_rtt_s + st.probe_queued * st.probe_service_s
            if st.probing:
                now = max(now, st.probe_out_s)   # the probe in flight is already this late
            return now + st.payload_s
        return st.rtt_ewma

    def queued(self, st: WorkerState) -> int:
        """Pushes queued at the server, as last seen."""
        return st.probe_queued if self.uses_probes and st.probe_rtt_s is not None else st.busy

    def efficient(self, st: WorkerState) -> bool:
        """Whether an exchange now is cheap relative to the local work it carries (rule 5)."""
        cost = self.cost(st)
        return cost is None or cost <= self.rho * st.unsent_compute_s

    def decide(self, st: WorkerState) -> Action:
        if st.pending:
            return Action.WAIT if st.steps_while_pending >= st.max_skip else Action.CONTINUE
        st.skip_reason = ""
        if st.skips >= st.max_skip:
            return Action.PUSH_AND_WAIT  # forced sync keeps staleness bounded
        if not self.efficiency:
            return Action.PUSH
        if self.value and st.update_norm > 0:
            v = st.unsent_norm / st.update_norm
            if v >= self.value_high:
                return Action.PUSH
            if v < self.value_low:
                return self._skip(st, "value")
        if self.queued(st) > self.busy_max:
            return self._skip(st, "busy")
        return Action.PUSH if self.efficient(st) else self._skip(st, "cost")

    @staticmethod
    def _skip(st: WorkerState, reason: str) -> Action:
        st.skip_reason = reason
        return Action.CONTINUE


def make(config, n_workers: int) -> tuple[ESP, EspSchedule]:
    """ESP's server policy and worker schedule for a config."""
    busy_max = config.esp_busy_max if config.esp_busy_max is not None else max(2, n_workers // 2)
    return (ESP(config.staleness, config.esp_scale),
            EspSchedule(rho=config.esp_rho, max_skip=config.esp_max_skip, busy_max=busy_max,
                        probe=config.esp_probe == "on", value=config.esp_value == "on",
                        efficiency=config.esp_efficiency == "on", value_low=config.esp_value_low,
                        value_high=config.esp_value_high))
