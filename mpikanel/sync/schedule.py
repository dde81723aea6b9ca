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
    critical: bool = False          # PSP: the next push closes the round (push on plan, block)
    max_skip: int = 0               # this worker's consecutive-skip bound (Schedule.setup sets it)
    skip_reason: str = ""           # why the schedule last chose CONTINUE (ESP: cost, value, busy)
    # ESP's probe and value inputs (see mpikanel.sync.esp)
    probing: bool = False           # a probe is in flight
    probe_out_s: float = 0.0        # compute seconds since the probe in flight was sent
    probe_rtt_s: float | None = None   # the last probe's round trip
    probe_queued: int = 0           # pushes queued at the server when it answered the last probe
    probe_service_s: float = 0.0    # the server's seconds per push at the last probe
    payload_s: float = 0.0          # EWMA: what a push's round trip costs beyond a probe's
    update_norm: float = 0.0        # the server's recent norm of one applied delta per step
    unsent_norm: float = 0.0        # norm of the unsent delta (local - base)

    def observe_rtt(self, rtt_s: float, alpha: float) -> None:
        """Fold one measured round trip into the EWMA."""
        self.rtt_ewma = rtt_s if self.rtt_ewma is None else alpha * rtt_s + (1 - alpha) * self.rtt_ewma


class Schedule:
    """Push after every step and wait for the reply (BSP, ASP, SSP)."""

    name = "blocking"
    #: a PUSH_AND_WAIT from this schedule is a forced sync (ESP's max-skip guard), not its routine
    forces_syncs = False
    #: the worker probes the server between pushes (ESP) and the server answers probes
    uses_probes = False
    #: the worker keeps the norm of its unsent delta in WorkerState.unsent_norm (ESP's value term)
    needs_norm = False

    def setup(self, st: WorkerState, rank: int, seed: int) -> None:
        """Per-worker set-up before the first step (ESP: this worker's jittered max-skip)."""

    def decide(self, st: WorkerState) -> Action:
        """The action after a step."""
        return Action.WAIT if st.pending else Action.PUSH_AND_WAIT
