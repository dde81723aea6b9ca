"""ESP, efficient synchronous parallel: each worker judges whether talking to the server is worth
it now and otherwise trains on (its skipped work accumulates and is pushed later); the server
bounds how far pushes run ahead with SSP's staleness bound."""
from __future__ import annotations

from dataclasses import dataclass

from ..hetero import uniform_draw
from .book import Book
from .damping import inverse_scale
from .options import ON_OFF, Bound, Option
from .schedule import Action, Schedule, WorkerState
from .ssp import SSP, STALENESS

SCALES = ("none", "inverse")
SCALE = Option("esp_scale", str, "none", "ESP: scale a stale delta on the server: none, or inverse = 1/(1+staleness)",
               choices=SCALES)
OPTIONS = (
    STALENESS,
    Option("esp_rho", float, 1.0, "ESP: push when the training a push carries (its typical steps' worth x seconds "
           "per step) >= RHO x the seconds it takes from the cluster (the server's queue x its time per push + its "
           "own service and payload time)", bound=Bound(0, strict=True)),
    Option("esp_max_skip", int, 8, "ESP: at most this many consecutive skipped exchanges, then a blocking sync",
           bound=Bound(0)),
    SCALE,
    Option("esp_probe", str, "on", "ESP: judge a push's cost by a header-only probe the server answers at once "
           "(on), or by past push round trips and the last reply's queue (off: an ablation)", choices=ON_OFF),
    Option("esp_value", str, "on", "ESP: weigh what the worker has to say, |unsent delta| in the server's per-step "
           "update norms (on), or not (off: an ablation)", choices=ON_OFF),
    Option("esp_efficiency", str, "on", "ESP: skip pushes that are not worth it now (on), or push whenever nothing "
           "is in flight (off: the ablation without the efficiency test; the max-skip bound stays)", choices=ON_OFF),
    Option("esp_value_low", float, 0.0, "ESP: skip, whatever the push costs, while the unsent delta holds fewer "
           "than this many typical steps' worth (default 0: no floor; measured slower under a straggler)",
           bound=Bound(0)),
    Option("esp_value_high", float, 4.0, "ESP: push even when dear once the unsent delta reaches this many typical "
           "steps' worth", bound=Bound(0, strict=True)),
    Option("esp_lag", float, 0.0, "ESP: > 0 replaces the value-against-cost rule by the value alone (the "
           "LAG/Gaia-style baseline, bench model lag): push once the unsent delta holds this many typical steps' "
           "worth", bound=Bound(0)),
)


class ESP(SSP):
    """Efficient synchronous parallel, server side: SSP's staleness bound over push clocks.

    Workers decide themselves when to communicate (mpikanel.schedule.EspSchedule); the server
    bounds how far a worker's pushes may run ahead of the slowest active worker and can scale
    a stale delta by 1/(1+tau), tau = versions applied since the worker's base.
    """

    name = "esp"

    def __init__(self, staleness: float, scale: str = "none") -> None:
        super().__init__(staleness)
        SCALE.check(scale)
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
    """Efficient synchronous parallel: push only when what the push carries is worth what it costs
    the cluster now (rule v3).

    At a step boundary with nothing in flight the worker pushes (non-blocking) or skips and trains
    on; skipped work stays in the unsent delta and goes with a later push. In order:

    1. forced sync: after ``st.max_skip`` consecutive skips (``max_skip`` jittered per worker),
       push and block; an exchange still in flight after ``st.max_skip`` further steps is waited
       for. This bounds staleness as in SSP;
    2. ``efficiency`` off (ablation): push;
    3. value: ``worth`` = |unsent delta| / the server's recent norm of one applied delta per local
       step (``value`` on, once reported; LAG-style), i.e. how many typical steps' worth of change
       the worker holds (``unsent_steps`` without it); ``worth < value_low``: skip, whatever the
       push costs (too little to say); measured ``worth >= value_high``: push (drifted far);
    4. value against cost: push when ``worth x step_s >= rho x cost``, the seconds of training the
       push carries against the seconds it takes from the cluster. With probes, cost = queued x
       the server's seconds per push + this push's own time (its service, and its payload on this
       worker's link: what a push's round trip adds to a probe's, at least one service time), and
       at least the compute time a probe still in flight has been out; without (ablation), the
       EWMA of past push round trips net of the time the sync policy held them. Nothing measured
       yet: push. A skip's reason is ``busy`` when the server's queue decided it (the push would
       pay off at an idle server), else ``value`` (too little to say even then), or ``cost``
       without probes.

    After a skip the worker sends a probe (``probe`` on) if none is in flight, so the next
    boundary decides on a fresh answer; before a push it takes the probe's answer first.

    ``lag`` > 0 replaces rules 3-4 by a threshold on the value alone (the LAG/Gaia-style baseline):
    push once ``worth >= lag``, whatever the push costs.
    """

    rho: float = 1.0
    max_skip: int = 8
    probe: bool = True
    value: bool = True
    efficiency: bool = True
    value_low: float = 0.0
    value_high: float = 4.0
    lag: float = 0.0            # > 0: the value-only rule (LAG/Gaia-like baseline): push once worth >= lag
    name = "esp"
    forces_syncs = True

    @property
    def uses_probes(self) -> bool:  # type: ignore[override]
        return self.probe and self.efficiency and not self.lag

    @property
    def needs_norm(self) -> bool:  # type: ignore[override]
        return self.value and self.efficiency

    def setup(self, st: WorkerState, rank: int, seed: int) -> None:
        st.max_skip = jittered_max_skip(self.max_skip, seed, rank)

    def own_cost(self, st: WorkerState) -> float:
        """Seconds this push itself takes from the cluster: its service and its payload on the link."""
        return max(st.payload_s, st.probe_service_s)

    def cost(self, st: WorkerState) -> float | None:
        """Seconds a push would take from the cluster now (None before anything was measured)."""
        if self.uses_probes and st.probe_rtt_s is not None:
            now = st.probe_queued * st.probe_service_s + self.own_cost(st)
            return max(now, st.probe_out_s) if st.probing else now
        return st.rtt_ewma

    def worth(self, st: WorkerState) -> float:
        """Typical steps' worth of change the unsent delta holds."""
        if self.value and st.update_norm > 0:
            return st.unsent_norm / st.update_norm
        return float(st.unsent_steps)

    def decide(self, st: WorkerState) -> Action:
        if st.pending:
            return Action.WAIT if st.steps_while_pending >= st.max_skip else Action.CONTINUE
        st.skip_reason = ""
        if st.skips >= st.max_skip:
            return Action.PUSH_AND_WAIT  # forced sync keeps staleness bounded
        if not self.efficiency:
            return Action.PUSH
        worth = self.worth(st)
        if self.lag > 0:            # the baseline that weighs the value alone, never the cost
            return Action.PUSH if worth >= self.lag else self._skip(st, "value")
        if worth < self.value_low:
            return self._skip(st, "value")
        if self.value and st.update_norm > 0 and worth >= self.value_high:
            return Action.PUSH
        cost = self.cost(st)
        carried = worth * st.unsent_compute_s / max(1, st.unsent_steps)
        if cost is None or carried >= self.rho * cost:
            return Action.PUSH
        if not self.uses_probes or st.probe_rtt_s is None:
            return self._skip(st, "cost")
        return self._skip(st, "busy" if carried >= self.rho * self.own_cost(st) else "value")

    @staticmethod
    def _skip(st: WorkerState, reason: str) -> Action:
        st.skip_reason = reason
        return Action.CONTINUE


def make(config, n_workers: int) -> tuple[ESP, EspSchedule]:
    """ESP's server policy and worker schedule for a config."""
    return (ESP(config.staleness, config.esp_scale),
            EspSchedule(rho=config.esp_rho, max_skip=config.esp_max_skip, probe=config.esp_probe == "on",
                        value=config.esp_value == "on", efficiency=config.esp_efficiency == "on",
                        value_low=config.esp_value_low, value_high=config.esp_value_high, lag=config.esp_lag))
