"""A worker's decisions, without MPI or clocks: SGD steps on its shard, pushes, merges, budget.

:func:`worker_core` is a generator. It runs the numba step itself and talks to any exchanger
with WorkerClient's non-blocking ``delta``/``start``/``test``/``send_state``; where time must
pass it yields an effect to its driver and gets the result back:

* ``Compute(wall_s, cpu_s)`` after each step -> ``(compute_s, injected_s)``: the MPI driver
  (:class:`mpikanel.worker_loop.Pacer`) sleeps the injected slowdown and returns the measured
  wall time; the simulator returns
  its step-time model and advances its virtual clock; a paced MPI driver (``--step-time``)
  answers ``(compute_s, slept_s, injected_s)``: the step lasted compute_s + slept_s, of which
  injected_s came from the injected heterogeneity;
* ``WAIT`` -> the Reply of the exchange in flight: the MPI driver blocks inside MPI, the
  simulator suspends the worker until the reply's arrival event;
* ``PROBE_WAIT`` -> the ProbeAnswer of the probe in flight (ESP, before a push: at most one
  message is ever in flight per worker).

A Schedule (mpikanel.sync) decides at each step boundary whether to push, keep training,
or wait; replies are merged so that steps taken while an exchange was in flight are kept:
``local = new_params + (local_now - local_at_send)``.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Generator, Protocol

import numpy as np

from .budget import UNLIMITED
from .messages import PAYLOAD_OFFSET, Answer, Flag
from ..errors import TrainingError
from ..hetero import Injector
from ..kernels import BoundModel, LazyDecay, lazy_decay
from ..lr_schedule import scheduled_rate
from ..sync.schedule import Action, Schedule, WorkerState
from .key_tracker import KeyTracker
from .part_keys import PartKeys

RTT_EWMA_ALPHA = 0.3
#: bytes of a probe (header and meta, no payload): what an injected link delay is charged for it
PROBE_BYTES = PAYLOAD_OFFSET


@dataclass(frozen=True)
class Compute:
    """Effect: a step on `rows` rows just ran for wall_s (cpu_s of CPU); the driver answers
    (compute_s, injected_s)."""

    wall_s: float
    cpu_s: float
    rows: int


@dataclass
class Reply:
    """What the server answered to one push."""

    params: np.ndarray   # the parameters (or their values at ``keys``): valid until the next exchange
    version: int
    plan: int
    busy: int
    held_s: float        # seconds the server held the push (sync-policy waiting)
    rtt_s: float         # wall seconds from start() to the reply, injected link delay included
    blocked_s: float     # seconds this worker spent blocked in wait() for this exchange
    delayed_s: float     # of blocked_s, seconds spent sleeping out an injected link delay
    landed_ago_s: float = 0.0  # seconds between the reply landing and the worker taking it
    update_norm: float = 0.0   # the server's recent norm of one applied delta per local step
    lease: int = 0            # samples the worker may process beyond the push this answers
    finish: bool = False      # the work budget is spent: push unsent work as DONE and leave
    last: bool = False        # this reply answers the worker's DONE push
    checkpoint: int = 0       # the server asks for this worker's part of checkpoint number N (0: no)
    stop: bool = False        # the server stops the run after this checkpoint
    critical: bool = False    # PSP: this worker's next push closes the round: push on plan and block
    keys: np.ndarray | None = None  # a sparse reply: the keys params holds (the rest did not change)
    nbytes: int = 0           # bytes received
    counted: int = 0          # samples the server had counted against the budget when it answered

    @classmethod
    def of(cls, a: Answer, params: np.ndarray, keys: np.ndarray | None, nbytes: int, last: bool, rtt_s: float,
           blocked_s: float = 0.0, delayed_s: float = 0.0, landed_ago_s: float = 0.0) -> "Reply":
        """The reply a worker takes from the server's answer (the one decoder of its flags, MPI and simulator)."""
        return cls(params, a.version, a.plan, a.busy, a.held_s, rtt_s, blocked_s, delayed_s, landed_ago_s,
                   a.update_norm, a.lease, bool(a.flags & Flag.FINISH), last,
                   a.seq if a.flags & Flag.CHECKPOINT else 0, bool(a.flags & Flag.STOP),
                   bool(a.flags & Flag.CRITICAL), keys, nbytes, a.counted)


@dataclass
class ProbeAnswer:
    """What the server answered to a probe: how dear a push would be now."""

    rtt_s: float         # probe round trip (header-only frames), timed when the answer landed
    version: int
    queued: int          # pushes arrived at the server and not yet handled
    service_s: float     # the server's recent seconds per push handled
    recv_bps: float      # bytes per second the server has been receiving
    update_norm: float   # recent norm of one applied delta per local step


#: Effect: block until the exchange in flight completes; the driver answers its Reply
WAIT = "wait"
#: Effect: block until the probe in flight is answered; the driver answers its ProbeAnswer
PROBE_WAIT = "probe-wait"

Effect = Compute | str


class Exchanger(Protocol):
    """The part of comm.worker.WorkerClient the loop needs."""

    @property
    def delta(self) -> np.ndarray: ...

    def pack(self) -> int: ...

    def pack_keys(self, keys: np.ndarray, values: np.ndarray) -> int: ...

    def start(self, clock: int, steps: int, step_s: float, last: bool, base_version: int = 0,
              rtt_s: float = 0.0, delay_s: float = 0.0, samples: int = 0, background: bool = False) -> None: ...

    def test(self): ...

    def wait(self): ...

    @property
    def probing(self) -> bool: ...

    def probe_start(self, delay_s: float = 0.0) -> None: ...

    def probe_test(self): ...

    def send_state(self, state: dict, seq: int) -> None: ...


@dataclass
class WorkerStats:
    """Per-worker counters and timings for the run summary."""

    rank: int
    rows: int
    steps: int = 0
    samples: int = 0              # training samples processed (the work budget counts these)
    pushes: int = 0
    bytes_sent: int = 0           # push payload bytes (dense or sparse frames)
    bytes_received: int = 0       # reply bytes
    compute_s: float = 0.0
    comm_s: float = 0.0           # blocked in an exchange, not held by the policy
    wait_s: float = 0.0           # blocked while the server held the push (sync policy)
    injected_s: float = 0.0       # injected slowdown, pauses and blocking link delay
    pacing_s: float = 0.0         # --step-time: slept to fill steps up to their modeled time, injection aside
    paced_s: float = 0.0          # --step-time: the modeled steps' seconds (step time x rows/batch x factor + pauses)
    pacing_missed: int = 0        # --step-time: steps whose compute outlasted their modeled time
    slowdown: float = 1.0
    exchanges_completed: int = 0
    skips: int = 0                # step boundaries where the worker chose not to communicate
    skip_run_max: int = 0         # most consecutive skips (ESP keeps it <= --esp-max-skip)
    forced_syncs: int = 0
    steps_while_pending: int = 0  # local steps taken while an exchange was in flight
    lease_waits: int = 0          # times the worker ran out of its budget lease and synced to renew it
    merges_after_step: int = 0    # replies that landed while the worker computed: merged at that step's end
    merges_blocked: int = 0       # replies the worker blocked for
    merge_lag_s: float = 0.0      # seconds replies sat landed before the worker merged them (total)
    probes: int = 0               # ESP probes sent
    probe_rtt_mean_s: float = 0.0
    skips_by_reason: dict = field(default_factory=dict)   # why each skip: cost, value, busy
    max_skip: int = 0             # this worker's consecutive-skip bound (ESP jitters it per worker)
    rtt_mean_s: float = 0.0
    rtt_p95_s: float = 0.0
    produced: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    rtts: list = field(default_factory=list, repr=False)
    probe_rtts: list = field(default_factory=list, repr=False)

    def public(self) -> dict:
        """JSON-ready dict (without the delta sum vector and raw RTTs)."""
        if self.rtts:
            self.rtt_mean_s = float(np.mean(self.rtts))
            self.rtt_p95_s = float(np.percentile(self.rtts, 95))
        if self.probe_rtts:
            self.probe_rtt_mean_s = float(np.mean(self.probe_rtts))
        d = asdict(self)
        d.pop("produced")
        d.pop("rtts")
        d.pop("probe_rtts")
        d["exchanges_started"] = self.pushes
        return d


@dataclass(frozen=True)
class StepPlan:
    """How many SGD steps a worker takes and with which hyper-parameters.

    With a shared budget (``lease`` set) a worker keeps passing over its shard until the server's
    leases end the run; ``lease`` is what it may process before its first reply. Otherwise it
    makes ``epochs`` passes over its own shard.
    """

    epochs: int
    batch_size: int
    lr: float
    l2: float
    n_classes: int
    max_steps: int | None = None
    lease: int | None = None
    schedule: str = "constant"          # mpikanel.lr_schedule over the work budget
    warmup: float = 0.0
    budget_samples: int | None = None   # the shared budget's samples (progress of a scheduled rate)

    def rate_for(self, rows: int, progress: float = 0.0) -> float:
        """The learning rate of a step on `rows` rows at `progress` through the budget (the
        schedule's rate): a partial minibatch (an epoch's or the budget's last rows) moves the
        model in proportion to its rows. The kernels average the gradient over the rows given, so a
        3-row remainder at the full rate would be a full-size step on a 3-sample estimate (it
        showed as a jump in the loss at the end of every run)."""
        lr = self.lr if self.constant else scheduled_rate(self.lr, self.schedule, self.warmup, progress)
        return lr * min(1.0, rows / self.batch_size) if self.batch_size > 0 else lr

    @property
    def constant(self) -> bool:
        """Whether every step runs at the base rate (no schedule, no warm-up)."""
        return self.schedule == "constant" and self.warmup == 0.0

    def steps_per_epoch(self, rows: int) -> int:
        """Minibatches in one pass over `rows` rows."""
        return max(1, math.ceil(rows / self.batch_size))

    def total_steps(self, rows: int) -> int | None:
        """Most steps this worker takes in the whole run (None: until the shared budget is spent)."""
        n = None if self.lease is not None else self.epochs * self.steps_per_epoch(rows)
        if self.max_steps is None:
            return n
        return self.max_steps if n is None else min(n, self.max_steps)


class BatchCursor:
    """Minibatch row indices, reshuffled every epoch; its state resumes the exact sequence."""

    def __init__(self, rows: int, plan: StepPlan, rng: np.random.Generator) -> None:
        self.rows, self.plan, self.rng = rows, plan, rng
        self.per_epoch = plan.steps_per_epoch(rows)
        self.total = plan.total_steps(rows)
        self.step = 0                                   # steps handed out so far
        self.order = np.zeros(0, dtype=np.int64)

    @property
    def done(self) -> bool:
        """Whether the worker has taken all its steps (never, under a shared budget)."""
        return self.total is not None and self.step >= self.total

    def next(self) -> np.ndarray | None:
        """Row indices of the next step, or None when the worker's steps are done."""
        if self.done:
            return None
        b = self.step % self.per_epoch
        if b == 0:
            self.order = self.rng.permutation(self.rows).astype(np.int64)
        self.step += 1
        return self.order[b * self.plan.batch_size:(b + 1) * self.plan.batch_size]

    def state(self) -> dict:
        """JSON-able position: step, generator state (the order travels separately)."""
        return {"step": self.step, "rng": self.rng.bit_generator.state}

    def restore(self, state: dict, order: np.ndarray) -> None:
        """Continue from a saved position."""
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["rng"]
        self.order = np.asarray(order, dtype=np.int64)


class _Worker:
    """State of one worker's run: local/base parameters, the pending exchange, counters."""

    def __init__(self, client: Exchanger, params: np.ndarray, stats: WorkerStats,
                 injector: Injector, rank: int) -> None:
        self.client = client
        self.local = params.copy()
        self.base = params.copy()
        self.at_send = np.empty_like(params)
        self.st = WorkerState()
        self.stats = stats
        self.injector = injector
        self.rank = rank
        self.base_version = 0
        self.step = 0
        self.stopped = False          # the server asked this worker to stop (checkpoint + exit)
        self.finished = False         # the server said the work budget is spent
        self.allowance = UNLIMITED    # samples it may still process before the server renews its lease
        self.counted = 0              # the budget's samples the server had counted at the last reply
        self.in_flight = 0            # samples of the push that reply has not answered yet
        self.cursor: BatchCursor | None = None
        # with a KeyTracker, pushes read only the keys steps changed; at_send then equals local
        # wherever no step changed a key since the last push (push and merge keep it so)
        self.tracker: KeyTracker | None = None
        # with a tracker, the keys a checkpoint part can be nonzero at (no model-sized pass at a cut)
        self.part_keys: PartKeys | None = None
        # CSR rows with L2: steps decay only the features they touch (kernels.lazy), flushed
        # before the last push; a checkpoint part holds the stamps
        self.lazy: LazyDecay | None = None

    def flush_decay(self) -> None:
        """Apply every pending lazy decay to local (its changed keys become unsent work)."""
        if self.lazy is None:
            return
        keys = self.lazy.flush(self.local)
        if self.tracker is not None:
            self.tracker.add_keys(keys)
            self.part_keys.flushed()

    def track(self, tracker: KeyTracker) -> None:
        """Push only the keys the tracker saw change (and any unsent work already in local)."""
        self.tracker = tracker
        tracker.add_keys(np.flatnonzero(self.local != self.base))
        self.at_send[:] = self.local
        self.part_keys = PartKeys.seeded(self.stats.produced, self.lazy)

    def _frame_delta(self) -> int:
        """Put every unsent step (local - base) in the client's frames; the payload bytes."""
        tracker = self.tracker
        if tracker is None:
            delta = self.client.delta
            np.subtract(self.local, self.base, out=delta)
            self._check_finite(delta)
            self.stats.produced += delta
            self.at_send[:] = self.local
            return self.client.pack()
        keys = tracker.take()
        values = self.local[keys] - self.base[keys]
        self._check_finite(values)
        self.at_send[keys] = self.local[keys]
        self.part_keys.stepped(keys)
        nz = np.flatnonzero(values)
        keys, values = keys[nz], values[nz]
        self.stats.produced[keys] += values
        self.part_keys.pushed(keys)
        return self.client.pack_keys(keys, values)

    def _check_finite(self, delta: np.ndarray) -> None:
        if not math.isfinite(float(delta.sum())):
            raise TrainingError(f"worker rank {self.rank} produced non-finite parameters at step "
                                f"{self.step} (learning rate too high?)")

    def push(self, last: bool, background: bool = False) -> None:
        """Start an exchange carrying every unsent step (local - base); ``background``: keep
        training while it is in flight."""
        if last:
            self.flush_decay()
        nbytes = self._frame_delta()
        st = self.st
        # seconds per full minibatch: the budget's last partial batches must not look like a speed-up
        batch = self.cursor.plan.batch_size if self.cursor is not None else 0
        step_s = (st.unsent_compute_s * batch / st.unsent_samples if batch and st.unsent_samples
                  else st.unsent_compute_s / max(st.unsent_steps, 1))
        self.stats.pushes += 1
        self.stats.bytes_sent += nbytes
        self.client.start(self.stats.pushes, st.unsent_steps, step_s, last,
                          base_version=self.base_version, rtt_s=st.rtt_ewma or 0.0,
                          delay_s=self.injector.link_delay(nbytes), samples=st.unsent_samples,
                          background=background)
        self.in_flight = st.unsent_samples
        st.unsent_steps, st.unsent_compute_s, st.unsent_samples = 0, 0.0, 0
        st.pending, st.steps_while_pending, st.skips = True, 0, 0

    def capture(self, finished: bool) -> dict:
        """Resumable state for a checkpoint part, valid until the worker trains on (the part is
        written at once). With a tracker, ``unsent``, ``produced`` and ``lazy_stamps`` are
        KeyedVectors read at the touched keys only (PartKeys); otherwise the arrays are its own
        (``produced``, ``order``) or new (``unsent``), with no copy of the model-sized ones. With
        lazy decay the part holds its stamps and product (no flush: the checkpoint changes
        nothing in the run)."""
        st = asdict(self.st)
        st["pending"] = st["probing"] = False
        stats = {f.name: getattr(self.stats, f.name) for f in fields(self.stats) if f.name != "produced"}
        part = {"state": {"rank": self.rank, "finished": finished, "cursor": self.cursor.state(),
                          "schedule": st, "base_version": self.base_version, "stats": stats,
                          "injector_step": self.injector.step, "allowance": self.allowance,
                          "budget_finished": self.finished, "counted": self.counted},
                "order": self.cursor.order}
        if self.part_keys is not None:
            part.update(self.part_keys.encode(self.local, self.base, self.stats.produced, self.tracker))
        else:
            part["unsent"], part["produced"] = self.local - self.base, self.stats.produced
            if self.lazy is not None:
                part["lazy_stamps"] = self.lazy.saved()[0]
        if self.lazy is not None:
            part["state"]["lazy_prod"] = float(self.lazy.prod[0])
        return part

    def restore(self, saved: dict) -> None:
        """Continue from a checkpointed state: local = global + the unsent work."""
        state = saved["state"]
        self.local += np.asarray(saved["unsent"])
        self.base_version = int(state["base_version"])
        self.cursor.restore(state["cursor"], saved["order"])
        self.step = self.cursor.step
        self.injector.step = int(state["injector_step"])
        self.allowance = int(state.get("allowance", UNLIMITED))
        self.counted = int(state.get("counted", 0))
        self.finished = bool(state.get("budget_finished", False))
        for key, value in state["schedule"].items():
            setattr(self.st, key, value)
        for key, value in state["stats"].items():
            setattr(self.stats, key, value)
        self.stats.produced = np.array(saved["produced"], dtype=np.float64)
        if self.lazy is not None and "lazy_stamps" in saved:
            self.lazy.load(np.asarray(saved["lazy_stamps"]), float(state["lazy_prod"]))

    def merge(self, reply) -> None:
        """Take the server's parameters, keeping steps made since the push."""
        if reply.keys is None:
            self.local -= self.at_send
            self.local += reply.params
            self.base[:] = reply.params
            if self.tracker is not None:
                self.at_send[:] = self.local
        else:
            # only these keys moved on the server (every key this worker pushed is among them);
            # elsewhere at_send == base, so the dense merge would leave local as it is
            k = reply.keys
            self.local[k] = (self.local[k] - self.at_send[k]) + reply.params
            self.base[k] = reply.params
            if self.tracker is not None:
                self.at_send[k] = self.local[k]
        self.stats.bytes_received += reply.nbytes
        self.base_version = reply.version
        st, stats = self.st, self.stats
        st.pending = False
        st.steps_since_reply = 0
        st.busy, st.plan, st.critical = reply.busy, max(1, reply.plan), reply.critical
        # the lease counts from the push this reply answers: steps taken since then use it up
        self.allowance = reply.lease - st.unsent_samples
        self.counted, self.in_flight = reply.counted, 0
        self.finished = self.finished or reply.finish
        # the exchange's cost: its round trip minus the time the policy held it (held pushes do
        # not block a non-blocking worker; a slow link or a congested server does count)
        net = max(0.0, reply.rtt_s - reply.held_s)
        st.observe_rtt(net, RTT_EWMA_ALPHA)
        if st.probe_rtt_s is not None:       # what the payload adds to a probe's round trip
            extra = max(0.0, net - st.probe_rtt_s)
            st.payload_s = RTT_EWMA_ALPHA * extra + (1 - RTT_EWMA_ALPHA) * st.payload_s
        if reply.update_norm > 0:
            st.update_norm = reply.update_norm
        stats.rtts.append(reply.rtt_s)
        stats.exchanges_completed += 1
        if reply.blocked_s > 0:
            stats.merges_blocked += 1
        else:
            stats.merges_after_step += 1
        stats.merge_lag_s += reply.landed_ago_s
        held = min(reply.held_s, reply.blocked_s - reply.delayed_s)
        stats.wait_s += max(0.0, held)
        stats.comm_s += max(0.0, reply.blocked_s - reply.delayed_s - max(0.0, held))
        stats.injected_s += reply.delayed_s
        if reply.checkpoint:
            self.client.send_state(self.capture(finished=reply.last), reply.checkpoint)
        self.stopped = reply.stop

    def progress(self, plan: StepPlan, rows: int) -> float:
        """How far through the work budget a step of `rows` rows is, at its middle: the server's count
        at the last reply plus what this worker did since (shared budget), or its own steps."""
        if plan.budget_samples:
            return (self.counted + self.in_flight + self.st.unsent_samples + 0.5 * rows) / plan.budget_samples
        total = self.cursor.total if self.cursor is not None else None
        return (self.cursor.step - 0.5) / total if total else 0.0

    def wait(self) -> Generator[Effect, Any, None]:
        """Block until the pending exchange completes, then merge."""
        self.merge((yield WAIT))

    def probe(self) -> None:
        """Ask the server what a push would cost now, without waiting for the answer."""
        self.client.probe_start(self.injector.link_delay(PROBE_BYTES))
        self.st.probing, self.st.probe_out_s = True, 0.0
        self.stats.probes += 1

    def observe_probe(self, a: ProbeAnswer) -> None:
        """Take a probe's answer into the schedule's state."""
        st = self.st
        st.probing, st.probe_out_s = False, 0.0
        st.probe_rtt_s, st.probe_queued, st.probe_service_s = a.rtt_s, a.queued, a.service_s
        if a.update_norm > 0:
            st.update_norm = a.update_norm
        self.stats.probe_rtts.append(a.rtt_s)

    def poll_probe(self) -> None:
        """Take the probe's answer if it has landed."""
        if self.st.probing:
            answer = self.client.probe_test()
            if answer is not None:
                self.observe_probe(answer)

    def settle_probe(self) -> Generator[Effect, Any, None]:
        """Before a push: wait for the probe in flight, so one message at a time is in flight."""
        if self.st.probing:
            self.observe_probe((yield PROBE_WAIT))

    def unsent_norm(self) -> float:
        """Norm of the unsent delta (computed in the idle push buffer)."""
        if self.tracker is not None:
            k = self.tracker.current()
            return float(np.linalg.norm(self.local[k] - self.base[k]))
        delta = self.client.delta
        np.subtract(self.local, self.base, out=delta)
        return float(np.linalg.norm(delta))

    def poll(self) -> None:
        """Merge the pending exchange if it has completed (drives MPI progress too)."""
        reply = self.client.test()
        if reply is not None:
            self.merge(reply)


def worker_core(client: Exchanger, data: BoundModel, params: np.ndarray, plan: StepPlan,
                rng: np.random.Generator, rank: int, injector: Injector, schedule: Schedule | None = None,
                resume: dict | None = None) -> Generator[Effect, Any, tuple[np.ndarray, WorkerStats]]:
    """Train on the bound shard under `schedule`; returns the last local parameters and stats.

    The worker never processes more samples than its budget lease allows: when the lease is
    used up it pushes and waits for the server to renew it. It ends when the server says the
    budget is spent (FINISH) or, with a per-worker budget, after its own steps; either way the
    last push carries everything still unsent with the DONE flag, so no local work is ever
    dropped. A reply flagged CHECKPOINT makes the worker send its state to the server; one
    flagged STOP ends the loop after that (the run resumes from the checkpoint).
    """
    schedule = schedule or Schedule()
    scratch = data.scratch()
    stats = WorkerStats(rank=rank, rows=data.rows, slowdown=injector.factor, produced=np.zeros_like(params))
    w = _Worker(client, params, stats, injector, rank)
    w.cursor = cursor = BatchCursor(data.rows, plan, rng)
    w.allowance = plan.lease if plan.lease is not None else UNLIMITED
    schedule.setup(w.st, rank, injector.spec.seed)
    stats.max_skip = w.st.max_skip
    w.lazy = lazy_decay(data, plan.l2)
    if resume is not None:
        w.restore(resume)
        if resume["state"]["finished"]:
            return w.local, stats
    if KeyTracker.usable(data, plan.l2, getattr(client, "push_mode", "dense"), lazy=w.lazy is not None):
        w.track(KeyTracker(data, params.size))
    st = w.st
    while not (w.stopped or w.finished or cursor.done):
        if w.allowance <= 0:
            # lease used up: hand the work in and wait for the server to renew the lease
            stats.lease_waits += 1
            if not st.pending:
                yield from w.settle_probe()
                w.push(last=False)
            yield from w.wait()
            continue
        idx = cursor.next()
        if idx.size > w.allowance:
            idx = idx[:w.allowance]          # the budget's last partial minibatch
        yield from _step(w, data, plan, idx, scratch)
        if st.pending:
            st.steps_while_pending += 1
            stats.steps_while_pending += 1
            w.poll()
        w.poll_probe()
        if w.stopped or w.finished or cursor.done:
            break
        if schedule.needs_norm and not st.pending:
            st.unsent_norm = w.unsent_norm()
        action = schedule.decide(st)
        if action == Action.CONTINUE:
            if not st.pending:
                st.skips += 1
                stats.skips += 1
                stats.skip_run_max = max(stats.skip_run_max, st.skips)
                if st.skip_reason:
                    stats.skips_by_reason[st.skip_reason] = stats.skips_by_reason.get(st.skip_reason, 0) + 1
                if schedule.uses_probes and not st.probing:
                    w.probe()
        elif action == Action.WAIT:
            yield from w.wait()
        else:
            if st.pending:
                yield from w.wait()
            if w.stopped or w.finished:
                break
            yield from w.settle_probe()
            forced = action == Action.PUSH_AND_WAIT and schedule.forces_syncs
            stats.forced_syncs += int(forced)
            w.push(last=False, background=action == Action.PUSH)
            if action == Action.PUSH_AND_WAIT:
                yield from w.wait()
    if st.pending and not w.stopped:
        yield from w.wait()
    if not w.stopped:
        # the last push carries everything unsent (also when a resumed run has no steps left)
        yield from w.settle_probe()
        w.push(last=True)
        yield from w.wait()
    return w.local, stats


def _step(w: _Worker, data: BoundModel, plan: StepPlan, idx: np.ndarray,
          scratch) -> Generator[Effect, Any, None]:
    """One SGD step on rows `idx`; the driver says how long it took and what was injected."""
    w.step = w.cursor.step
    t0, c0 = time.perf_counter(), time.thread_time()
    rate = plan.rate_for(idx.size) if plan.constant else plan.rate_for(idx.size, w.progress(plan, idx.size))
    (w.lazy or data).step(w.local, idx, rate, plan.l2, scratch)
    if w.tracker is not None:
        w.tracker.add_rows(idx)
    compute, slow, *share = yield Compute(time.perf_counter() - t0, time.thread_time() - c0, int(idx.size))
    injected = share[0] if share else slow
    st, stats = w.st, w.stats
    stats.steps += 1
    stats.samples += int(idx.size)
    stats.compute_s += compute
    stats.injected_s += injected
    stats.pacing_s += slow - injected
    st.unsent_steps += 1
    st.unsent_samples += int(idx.size)
    st.unsent_compute_s += compute + slow
    st.steps_since_reply += 1
    if st.probing:
        st.probe_out_s += compute + slow
    w.allowance -= int(idx.size)
