"""Worker-side schedules: at each step boundary, push, keep training, or wait for the reply.

Pure: decisions are functions of a WorkerState the training loop keeps up to date from
measured quantities (no MPI, no clock reads here).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Action(IntEnum):
    """What the worker does after a step."""

    CONTINUE = 0        # keep training locally (no pending exchange: this is a skip)
    PUSH = 1            # start a non-blocking exchange and keep training
    PUSH_AND_WAIT = 2   # start an exchange and block until the reply
    WAIT = 3            # block until the pending exchange completes


@dataclass
class WorkerState:
    """Measured state a schedule decides from; the training loop maintains it."""

    unsent_steps: int = 0           # local steps whose delta has not been pushed
    unsent_samples: int = 0         # training samples in those steps (counted against the budget)
    unsent_compute_s: float = 0.0   # compute seconds of those steps
    steps_since_reply: int = 0      # steps since the last reply arrived
    pending: bool = False           # an exchange is in flight
    steps_while_pending: int = 0    # steps taken since the in-flight exchange started
    skips: int = 0                  # consecutive boundaries where the worker chose not to push
    rtt_ewma: float | None = None   # EWMA of exchange round-trip seconds (None before the first)
    busy: int = 0                   # the server's congestion hint from the last reply
    plan: int = 1                   # local steps the server asked for before the next push

    def observe_rtt(self, rtt_s: float, alpha: float) -> None:
        """Fold one measured round trip into the EWMA."""
        self.rtt_ewma = rtt_s if self.rtt_ewma is None else alpha * rtt_s + (1 - alpha) * self.rtt_ewma


class Schedule:
    """Push after every step and wait for the reply (BSP, ASP, SSP)."""

    name = "blocking"
    #: a PUSH_AND_WAIT from this schedule is a forced sync (ESP's max-skip guard), not its routine
    forces_syncs = False

    def decide(self, st: WorkerState) -> Action:
        """The action after a step."""
        return Action.WAIT if st.pending else Action.PUSH_AND_WAIT


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


@dataclass
class PspSchedule(Schedule):
    """Predicted synchronous parallel, worker side: run the planned steps, push, keep training
    while the round closes, fold those steps into the next delta.

    While waiting a worker trains at most as many steps as it was planned for the round (and at
    most ``max_wait_steps``): the wait is then no longer than a round, and the extra work in a
    delta stays proportional to the planned work, which keeps summed deltas stable.
    """

    max_wait_steps: int = 8
    train_while_waiting: bool = True    # False: the ZipLine-style ablation (idle until the reply)
    name = "psp"

    def decide(self, st: WorkerState) -> Action:
        if st.pending:
            if not self.train_while_waiting:
                return Action.WAIT
            limit = min(self.max_wait_steps, st.plan)
            return Action.WAIT if st.steps_while_pending >= limit else Action.CONTINUE
        if st.steps_since_reply < st.plan:
            return Action.CONTINUE
        return Action.PUSH if self.train_while_waiting else Action.PUSH_AND_WAIT
