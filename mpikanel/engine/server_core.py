"""The parameter server's decisions, without MPI: book, policy, apply order, budget, cut, stats.

A transport (the MPI loop in mpikanel.comm.server, or the simulator) hands each arriving push
to :meth:`ServerCore.on_push` and then asks :meth:`ServerCore.release` which workers to answer;
it sends each :class:`Answer` with the current parameters. Time is always passed in (seconds
since the run started), so the same code runs on wall time or on a virtual clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .budget import Budget
from .apply import apply_delta
from .messages import Answer, Flag, Op, scale_bits
from ..metrics import SnapshotRecorder
from .sparse import ReplyKeys
from ..sync import Book, SyncPolicy
from ..sync.damping import StalenessDamping


@dataclass
class Push:
    """One worker push as the core sees it (the transport decodes its frame into this)."""

    w: int                      # worker index (rank - 1)
    clock: int                  # the worker's clock after this push
    steps: int                  # local steps folded into the delta
    samples: int                # training samples folded into the delta
    base_version: int           # server version the delta was computed on
    step_s: float               # reported mean compute seconds per step
    last: bool = False          # the worker's DONE push
    stop_request: bool = False  # the worker was signalled: checkpoint and stop the run
    delta: np.ndarray | None = None   # valid until the push is answered: the range, or values at keys
    keys: np.ndarray | None = None    # a sparse push: the keys (of this server's range) delta holds


@dataclass
class ProbeReply:
    """What the server answers a probe with, at once: how dear a push would be now."""

    w: int
    version: int
    queued: int          # pushes arrived and not yet handled
    service_s: float     # recent server seconds per push handled (EWMA)
    recv_bps: float      # bytes per second the server has been receiving (EWMA over pushes)
    update_norm: float   # recent norm of one applied delta (EWMA)


@dataclass
class ServerStats:
    """What the server counted while serving."""

    pushes: np.ndarray            # pushes received per worker
    deltas_applied: int = 0       # deltas added to the global parameters
    held_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # seconds pushes were held per worker
    busy_s: float = 0.0           # seconds spent handling pushes (not waiting for them)
    wall_s: float = 0.0
    staleness_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))  # versions behind, per worker
    staleness_max: np.ndarray = field(default_factory=lambda: np.zeros(0))
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))          # local steps pushed
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0))        # training samples pushed
    service_s: float = 0.0                # injected server service time (--server-delay)
    clock_spread_max: int = 0             # most pushes the fastest active worker was ahead of the slowest
    probes: int = 0                       # probes answered (ESP)
    probe_s: float = 0.0                  # server seconds spent answering probes
    reply_snapshots_peak: int = 0         # most parameter copies replies were sent from at once (MPI)
    push_buffers: int = 0                 # push receive frames the server ended with (MPI: the pool's peak)
    unapplied: np.ndarray | None = None   # sum of (1 - scale) * delta: received but scaled away
    policy_report: dict | None = None     # the policy's own record (PSP rounds)
    stopped: bool = False                 # ended early after a stop checkpoint
    servers: list | None = None           # per server rank: key range, pushes, bytes, busy time, peak RSS (MPI)

    @classmethod
    def zeros(cls, n_workers: int) -> "ServerStats":
        """Empty counters for n_workers workers."""
        n = n_workers
        return cls(pushes=np.zeros(n, dtype=np.int64), held_s=np.zeros(n),
                   staleness_sum=np.zeros(n, dtype=np.int64), staleness_max=np.zeros(n, dtype=np.int64),
                   steps=np.zeros(n, dtype=np.int64), samples=np.zeros(n, dtype=np.int64))


EWMA_ALPHA = 0.2


def _ewma(old: float, x: float, n: int) -> float:
    """Exponentially weighted mean; the first observation (n <= 1) starts it."""
    return x if n <= 1 else EWMA_ALPHA * x + (1.0 - EWMA_ALPHA) * old


class ServerCore:
    """Holds the flat float64 parameters and decides, push by push, whom to answer with what.

    ``checkpoints`` (a mpikanel.checkpoint.CheckpointControl) turns on consistent cuts: the core
    holds every worker until all active ones have pushed, then answers them all with CHECKPOINT
    (``collect`` lists whose resumable state the transport must fetch before :meth:`cut_done`).

    With several servers the transport calls :meth:`lead`: this core then decides for all of
    them, applies deltas to its own key range only and logs every apply and answer in ``ops``.
    """

    def __init__(self, params: np.ndarray, policy: SyncPolicy, n_workers: int,
                 budget: Budget | None = None, recorder: SnapshotRecorder | None = None,
                 checkpoints: Any = None, on_progress: Callable[[ServerStats], None] | None = None,
                 push_mode: str = "dense", damping: str = "off") -> None:
        self.params = params
        self.damping = StalenessDamping(damping)    # --staleness-lr: the rate of a stale delta
        self._released_at = 0                       # the version a release (BSP, PSP) started applying at
        self.push_mode = push_mode                 # mpikanel.engine.sparse: replies carry changed keys unless dense
        self.replies: ReplyKeys | None = None      # (set at start) what each reply carries
        self.keys = slice(None)                    # the range this server applies to (lead)
        self.gather: Callable[[bool], None] | None = None
        # the other servers' checkpoint parts: start them for a checkpoint number, then wait for them
        self.parts: Callable[[int], Callable[[], list[dict]]] = lambda seq: (lambda: [])
        self.ops: list[tuple[int, int, int]] | None = None
        self.policy = policy
        self.n_workers = n_workers
        self.book = Book(n_workers)
        self.budget = budget if budget is not None else Budget(n_workers, None, 1)
        self.recorder = recorder
        self.checkpoints = checkpoints
        self.on_progress = on_progress
        self.stats = ServerStats.zeros(n_workers)
        self.worker_parts: dict[int, dict] = {}    # each worker's latest checkpoint part (manifest entry)
        self.stopped = False                       # ended early by a stop request (checkpointed)
        self.collect: list[int] = []               # workers whose state the transport must fetch now
        self.t_start = 0.0                         # the transport's clock at start (wall runs only)
        self._deltas: list[Any] = [None] * n_workers     # per worker: the range, (keys, values) or None
        self._ckpt_reason: str | None = None
        self._stop_after_ckpt = False
        self._arrived_since_release = 0
        self._cut_pending = False                  # the answers just made are a checkpoint cut
        self.cut_asked_at = self.cut_answered_at = 0.0   # when the cut began holding, and was answered
        self._stop_now = False                     # ... after which the run stops
        self.update_norm = 0.0                     # EWMA of the norm of one applied delta
        self.service_s = 0.0                       # EWMA of the seconds spent handling one push
        self.recv_bps = 0.0                        # EWMA of bytes per second received
        self._last_arrival: float | None = None
        self._serviced = 0                         # pushes the transport reported handling

    def lead(self, keys: slice, gather: Callable[[bool], None], parts: Callable[[int], Callable[[], list[dict]]]) -> None:
        """Decide for several servers: apply to ``params[keys]`` only and log ops to replay; the
        transport's ``gather(with_unapplied)`` fills the other ranges of ``params`` (and of
        ``stats.unapplied``) before a snapshot or the end, and ``parts(seq)`` has the other servers
        write their parts of checkpoint `seq` (it returns the wait for their manifest entries)."""
        self.keys, self.gather, self.parts, self.ops = keys, gather, parts, []

    @property
    def done(self) -> bool:
        """Every worker has left, or a stop checkpoint ended the run."""
        return self.book.finished or self.stopped

    def start(self, now: float) -> None:
        """First snapshot of the parameters; every worker starts from them (at this version)."""
        self.replies = ReplyKeys(self.push_mode, self.params[self.keys].size, self.n_workers, self.book.version)
        if self.recorder is not None:
            self.recorder.maybe_snapshot(now, self.params, self.book.version)

    def on_push(self, p: Push, now: float) -> None:
        """Record a push that arrived at `now`; apply it at once if the policy does."""
        w, st = p.w, self.stats
        st.pushes[w] += 1
        st.steps[w] += p.steps
        st.samples[w] += p.samples
        self.budget.on_push(w, p.samples, now)
        self.book.record_push(w, p.clock, p.last, p.step_s, now, base_version=p.base_version, steps=p.steps)
        self.policy.on_push(self.book, w)
        active = self.book.clock[self.book.active]
        if active.size:
            st.clock_spread_max = max(st.clock_spread_max, int(active.max() - active.min()))
        if p.stop_request:
            self._stop_after_ckpt = True
        self._deltas[w] = p.delta if p.keys is None or p.delta is None else (p.keys, p.delta)
        self._arrived_since_release += 1
        if self.policy.apply_on_arrival:
            self._apply(w)

    def holds_delta(self, w: int) -> bool:
        """Whether worker w's pushed delta waits to be applied (the transport keeps its frame)."""
        return self._deltas[w] is not None

    def _apply(self, w: int) -> None:
        delta = self._deltas[w]
        if delta is None:
            return
        self._deltas[w] = None
        keys = None
        if isinstance(delta, tuple):
            keys, delta = delta
        tau = max(0, self.book.version - int(self.book.base_version[w]))
        st = self.stats
        st.staleness_sum[w] += tau
        st.staleness_max[w] = max(st.staleness_max[w], tau)
        # deltas released together are one synchronous update: damping measures staleness from the release
        now = self.book.version if self.policy.apply_on_arrival else self._released_at
        scale = self.policy.delta_scale(self.book, w) * self.damping.scale(now, int(self.book.base_version[w]))
        if scale != 1.0 and st.unapplied is None:
            st.unapplied = np.zeros_like(self.params)
        delta = apply_delta(self.params[self.keys], delta, scale, keys,
                            None if st.unapplied is None else st.unapplied[self.keys])
        if self.ops is not None:
            self.ops.append((Op.APPLY, w, scale_bits(scale)))
        st.deltas_applied += 1
        self.book.version += 1
        if self.replies is not None:
            self.replies.applied(self.book.version, keys)
        norm = float(np.linalg.norm(delta))
        self.damping.observe(self.book.version, norm)
        # per local step, as the ESP value rule reads it (a delta of k steps carries k steps' worth)
        per_step = norm / max(1, int(self.book.steps[w]))
        self.update_norm = _ewma(self.update_norm, per_step, st.deltas_applied)

    def observe_service(self, seconds: float, nbytes: int, now: float) -> None:
        """The transport handled one push of `nbytes` bytes in `seconds`, ending at `now`."""
        self._serviced += 1                 # a counter, not a sum over workers: O(1) per push
        n = self._serviced
        self.service_s = _ewma(self.service_s, seconds, n)
        if self._last_arrival is not None and now > self._last_arrival:
            self.recv_bps = _ewma(self.recv_bps, nbytes / (now - self._last_arrival), n)
        self._last_arrival = now

    def probe(self, w: int, queued: int) -> ProbeReply:
        """Answer worker w's probe at once (also while its pushes are held): the cost of a push now."""
        self.stats.probes += 1
        return ProbeReply(w, self.book.version, queued, self.service_s, self.recv_bps, self.update_norm)

    def release(self, now: float) -> list[Answer]:
        """Workers to answer now (rank order), with their reply headers; snapshots and progress too."""
        self._maybe_schedule_checkpoint(now)
        answers = self._release(now)
        if self.recorder is not None and self.recorder.due(now):
            self._gather(False)
            self.recorder.maybe_snapshot(now, self.params, self.book.version)
        if self.on_progress is not None:
            self.on_progress(self.stats)
        return answers

    def _maybe_schedule_checkpoint(self, now: float) -> None:
        ctl = self.checkpoints
        if ctl is None or self._ckpt_reason is not None:
            return
        if ctl.stop_requested():
            self._stop_after_ckpt = True
        if self._stop_after_ckpt:
            self._ckpt_reason = "stop"
        else:
            self._ckpt_reason = ctl.due(now, int(self.stats.steps.sum()))
        if self._ckpt_reason is not None:
            self.cut_asked_at = now

    def _release(self, now: float) -> list[Answer]:
        book = self.book
        just_arrived, self._arrived_since_release = self._arrived_since_release, 0
        released = self.policy.release(book)
        checkpoint = self._ckpt_reason is not None
        if checkpoint:
            # a consistent cut: hold everyone until every active worker has pushed
            if (book.active & ~book.waiting).any():
                return []
            released = sorted(set(released) | {int(w) for w in np.flatnonzero(book.waiting)})
        if not released:
            return []
        if not self.policy.apply_on_arrival:
            self._released_at = book.version
            for w in released:          # rank order: bitwise reproducible sums
                self._apply(w)
        # congestion, not policy: the other pushes the server handled with yours (a push the sync
        # policy holds is not a queue in front of the next one)
        busy = max(0, just_arrived - 1)
        stop = checkpoint and self._stop_after_ckpt
        flags = (Flag.CHECKPOINT if checkpoint else 0) | (Flag.STOP if stop else 0)
        # with checkpoints on, a finishing worker's final state is kept for later checkpoints
        self.collect = [w for w in released if checkpoint or (self.checkpoints is not None and book.last_push[w])]
        answers = []
        for w in released:
            answers.append(self._answer(w, now, busy, flags | (Flag.CHECKPOINT if w in self.collect else 0)))
            book.record_release(w)
        self._cut_pending = checkpoint
        if checkpoint:
            self.cut_answered_at = now
        self._stop_now = stop
        if self.ops is not None:
            self.ops.extend((Op.REPLY, a.w, int(self.keeps_serving(a.w))) for a in answers)
        return answers

    def _gather(self, with_unapplied: bool) -> None:
        if self.gather is not None:
            self.gather(with_unapplied)

    def _answer(self, w: int, now: float, busy: int, flags: int) -> Answer:
        book = self.book
        lease = 0
        if book.last_push[w]:
            self.budget.leave(w)
        else:
            speeds = None if self.policy.lockstep else book.step_s
            lease = self.budget.renew(w, speeds, book.active)
            if self.budget.limited:
                self.policy.granted(book, w, -(-lease // self.budget.batch_size))
            if self.budget.finish(w):
                flags |= Flag.FINISH
        if self.policy.critical(book, w):
            flags |= Flag.CRITICAL
        held = now - float(book.arrived_at[w])
        self.stats.held_s[w] += held
        seq = self.checkpoints.seq if flags & Flag.CHECKPOINT else 0
        return Answer(w, int(book.clock[w]), book.version, self.policy.plan(book, w), busy, lease, flags, held,
                      self.update_norm, self.replies.reply(w, book.version) if self.replies else None, seq,
                      self.budget.counted)

    def keeps_serving(self, w: int) -> bool:
        """Whether the transport should listen for worker w's next push after answering it."""
        return bool(self.book.active[w]) and not self._stop_now

    def cut_done(self, now: float) -> None:
        """The transport fetched the parts of the workers in ``collect``: write the checkpoint if this
        was a cut (every server writes its own range: nothing is gathered)."""
        self.collect = []
        if self._cut_pending:
            self.checkpoints.write(self, self._ckpt_reason, final=False)
            self.checkpoints.written(now, int(self.stats.steps.sum()))
            self._ckpt_reason = None
            self._cut_pending = False
            self.stopped = self._stop_now

    def finish(self, now: float) -> ServerStats:
        """End of serving: final checkpoint and snapshot; returns the stats."""
        self.stats.wall_s = now
        self._gather(True)
        if self.checkpoints is not None and not self.stopped:
            self.cut_asked_at = self.cut_answered_at = now
            self.checkpoints.write(self, "end", final=True)
        if self.recorder is not None:
            self.recorder.final(now, self.params, self.book.version)
        self.stats.policy_report = self.policy.report() if hasattr(self.policy, "report") else None
        self.stats.stopped = self.stopped
        return self.stats

    def state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The server's resumable state: JSON-able part and arrays (between rounds only)."""
        b, st = self.book, self.stats
        meta = {"version": b.version, "deltas_applied": st.deltas_applied, "busy_s": st.busy_s,
                "policy": self.policy.state(), "budget": self.budget.state()}
        arrays = {"clock": b.clock, "active": b.active.astype(np.int8), "pushes": st.pushes,
                  "held_s": st.held_s, "staleness_sum": st.staleness_sum,
                  "staleness_max": st.staleness_max, "steps": st.steps, "samples": st.samples}
        if st.unapplied is not None:
            arrays["unapplied"] = st.unapplied
        return meta, arrays

    def restore(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Continue from a checkpointed server state."""
        b, st = self.book, self.stats
        b.version = int(meta["version"])
        st.deltas_applied = int(meta["deltas_applied"])
        st.busy_s = float(meta["busy_s"])
        self.budget.restore(meta["budget"])
        if meta.get("reshaped"):
            return      # another worker count (checkpoint.reshape): clocks, counters, policy start fresh
        b.clock[:] = arrays["clock"]
        b.active[:] = arrays["active"].astype(bool)
        for key in ("pushes", "held_s", "staleness_sum", "staleness_max", "steps", "samples"):
            getattr(st, key)[:] = arrays[key]
        if "unapplied" in arrays:
            st.unapplied = np.array(arrays["unapplied"], dtype=np.float64)
        self.policy.restore(meta["policy"])
