"""The parameter server's decisions, without MPI: book, policy, apply order, budget, cut, stats.

A transport (the MPI loop in mpikanel.comm.server, or the simulator) calls the core once per
event: :meth:`ServerCore.on_push` for each arriving push, :meth:`ServerCore.on_tick` once the
pushes at hand are in, :meth:`ServerCore.on_entries` with the checkpoint entries an outcome
asked for. Each returns an :class:`~mpikanel.engine.outcome.Outcome` (replies to send, frames to
free, ops to forward, entries to collect, stop) that the transport performs without reading the
core's members. Time is always passed in (seconds since the run started), so the same code runs
on wall time or on a virtual clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np

from .budget import Budget
from .apply import apply_delta
from .messages import Answer, Flag, Op, scale_bits
from .outcome import Outcome, Send
from ..checkpoint.coordinator import CheckpointCoordinator, PeerParts, ServerPart
from ..hetero import ServerDelay
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
    service_s: float = 0.0            # modelled service seconds the transport charged it (simulator)


@dataclass
class ProbeReply:
    """What the server answers a probe with, at once: how dear a push would be now."""

    w: int
    version: int
    queued: int          # pushes arrived and not yet handled
    service_s: float     # recent server seconds per push handled (EWMA)
    recv_bps: float      # bytes per second the server has been receiving (EWMA over pushes)
    update_norm: float   # recent norm of one applied delta (EWMA)


class CoreShape(NamedTuple):
    """What a transport sizes its buffers by."""

    n_params: int
    n_workers: int
    push_mode: str


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

    ``checkpoints`` (a :class:`~mpikanel.checkpoint.coordinator.CheckpointCoordinator`) turns on
    consistent cuts: the core holds every worker until all active ones have pushed, then answers
    them all with CHECKPOINT; the outcome lists whose entries the transport must hand to
    :meth:`on_entries`, which writes the cut.

    With several servers the transport calls :meth:`lead`: this core then decides for all of
    them, applies deltas to its own key range only and lists every apply and answer in the
    outcomes' ``ops``, for the other servers to replay.
    """

    def __init__(self, params: np.ndarray, policy: SyncPolicy, n_workers: int,
                 budget: Budget | None = None, recorder: SnapshotRecorder | None = None,
                 checkpoints: CheckpointCoordinator | None = None,
                 on_progress: Callable[[ServerStats], None] | None = None,
                 push_mode: str = "dense", damping: str = "off", service: ServerDelay | None = None) -> None:
        self.params = params
        self.damping = StalenessDamping(damping)    # --staleness-lr: the rate of a stale delta
        self._released_at = 0                       # the version a release (BSP, PSP) started applying at
        self.push_mode = push_mode                 # mpikanel.engine.sparse: replies carry changed keys unless dense
        self.replies: ReplyKeys | None = None      # (set at start) what each reply carries
        self.keys = slice(None)                    # the range this server applies to (lead)
        self.ops: list[tuple[int, int, int]] | None = None   # (lead) decisions not yet in an outcome
        self.policy = policy
        self.n_workers = n_workers
        self.book = Book(n_workers)
        self.budget = budget if budget is not None else Budget(n_workers, None, 1)
        self.recorder = recorder
        self.checkpoints = checkpoints
        self.on_progress = on_progress
        self.service = service                     # --server-delay: injected seconds per push handled
        self.stats = ServerStats.zeros(n_workers)
        self.stopped = False                       # ended early by a stop request (checkpointed)
        # per worker: the range, (keys, values) or None
        self._deltas: list[np.ndarray | tuple[np.ndarray, np.ndarray] | None] = [None] * n_workers
        self._arrived_since_release = 0
        self._stop_now = False                     # the answers just made end the run (a stop cut)
        self._final_snapshot = False               # (lead) on_end took the end state's snapshot
        self.update_norm = 0.0                     # EWMA of the norm of one applied delta
        self.service_s = 0.0                       # EWMA of the seconds spent handling one push
        self.recv_bps = 0.0                        # EWMA of bytes per second received
        self._last_arrival: float | None = None
        self._serviced = 0                         # pushes the transport reported handling

    def lead(self, keys: slice, peers: PeerParts) -> None:
        """Decide for several servers: apply to ``params[keys]`` only and list ops to replay;
        ``peers`` has the other servers write their parts of a checkpoint."""
        self.keys, self.ops = keys, []
        if self.checkpoints is not None:
            self.checkpoints.peers = peers

    def shape(self) -> CoreShape:
        """The sizes a transport allocates its frames by."""
        return CoreShape(self.params.size, self.n_workers, self.push_mode)

    def describe(self) -> str:
        """The policy this core runs, in words (for a stall's message)."""
        return self.policy.describe()

    @property
    def done(self) -> bool:
        """Every worker has left, or a stop checkpoint ended the run."""
        return self.book.finished or self.stopped

    def _outcome(self, **fields: Any) -> Outcome:
        """An outcome carrying the ops logged since the last one, and whether the run is over."""
        ops = []
        if self.ops:
            ops, self.ops = self.ops, []
        return Outcome(ops=ops, stop=self.done, **fields)

    def start(self, now: float) -> Outcome:
        """First snapshot of the parameters; every worker starts from them (at this version).
        The transport listens to every active worker."""
        self.replies = ReplyKeys(self.push_mode, self.params[self.keys].size, self.n_workers, self.book.version)
        if self.recorder is not None and self.recorder.due(now):
            ops = self._snapshot(now)
            if self.ops is not None:
                self.ops.extend(ops)
        return self._outcome(listen=[int(w) for w in np.flatnonzero(self.book.active)])

    def on_push(self, p: Push, now: float) -> Outcome:
        """Record a push that arrived at `now`; apply it at once if the policy does (its frame is
        then free)."""
        w, st = p.w, self.stats
        sleep_s = 0.0
        if self.service is not None:        # a congested server: service time per push handled
            sleep_s = self.service.draw(int(st.pushes.sum()))
        st.service_s += sleep_s + p.service_s
        st.pushes[w] += 1
        st.steps[w] += p.steps
        st.samples[w] += p.samples
        self.budget.on_push(w, p.samples, now)
        self.book.record_push(w, p.clock, p.last, p.step_s, now, base_version=p.base_version, steps=p.steps)
        self.policy.on_push(self.book, w)
        active = self.book.clock[self.book.active]
        if active.size:
            st.clock_spread_max = max(st.clock_spread_max, int(active.max() - active.min()))
        if p.stop_request and self.checkpoints is not None:
            self.checkpoints.stop_pushed()
        self._deltas[w] = p.delta if p.keys is None or p.delta is None else (p.keys, p.delta)
        self._arrived_since_release += 1
        if self.policy.apply_on_arrival:
            self._apply(w)
        return self._outcome(sleep_s=sleep_s, free=[] if self._deltas[w] is not None else [w])

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

    def on_served(self, seconds: float, nbytes: int, now: float) -> None:
        """The transport handled one push of `nbytes` bytes in `seconds`, ending at `now`."""
        self._serviced += 1                 # a counter, not a sum over workers: O(1) per push
        n = self._serviced
        self.service_s = _ewma(self.service_s, seconds, n)
        if self._last_arrival is not None and now > self._last_arrival:
            self.recv_bps = _ewma(self.recv_bps, nbytes / (now - self._last_arrival), n)
        self._last_arrival = now

    def on_load(self, busy_s: float = 0.0, probe_s: float = 0.0) -> None:
        """The transport spent `busy_s` handling pushes and `probe_s` answering probes."""
        self.stats.busy_s += busy_s
        self.stats.probe_s += probe_s

    def on_probe(self, w: int, queued: int) -> ProbeReply:
        """Answer worker w's probe at once (also while its pushes are held): the cost of a push now."""
        self.stats.probes += 1
        return ProbeReply(w, self.book.version, queued, self.service_s, self.recv_bps, self.update_norm)

    def on_tick(self, now: float) -> Outcome:
        """The pushes at hand are in: whom to answer now (rank order), with their reply headers;
        snapshots and progress too."""
        cut = None
        if self.checkpoints is not None:
            cut = self.checkpoints.begin(now, int(self.stats.steps.sum()))
        out = self._release(now)
        out.cut = cut is not None and self.checkpoints.collecting()
        if self.recorder is not None and self.recorder.due(now):
            out.ops.extend(self._snapshot(now))     # after this tick's applies, as the others replay them
        if self.on_progress is not None:
            self.on_progress(self.stats)
        return out

    def _snapshot(self, now: float, final: bool = False) -> list[tuple[int, int, int]]:
        """Snapshot the parameters for the curve. Leading several servers: only this server's
        range, counted as the whole vector for the thinning; returns the op that has the others
        copy their ranges now, with the same decisions (nothing is gathered while serving)."""
        st, rec = self.stats, self.recorder
        take = rec.final if final else rec.record
        if self.ops is None:
            take(now, self.params, self.book.version, st.deltas_applied)
            return []
        decisions = take(now, self.params[self.keys], self.book.version, st.deltas_applied, size=self.params.size)
        return [(Op.SNAPSHOT, 0, decisions)]

    def _release(self, now: float) -> Outcome:
        book = self.book
        just_arrived, self._arrived_since_release = self._arrived_since_release, 0
        released = self.policy.release(book)
        checkpoint = self.checkpoints is not None and self.checkpoints.holding()
        if checkpoint:
            # a consistent cut: hold everyone until every active worker has pushed
            if (book.active & ~book.waiting).any():
                return self._outcome()
            released = sorted(set(released) | {int(w) for w in np.flatnonzero(book.waiting)})
        if not released:
            return self._outcome()
        if not self.policy.apply_on_arrival:
            self._released_at = book.version
            for w in released:          # rank order: bitwise reproducible sums
                self._apply(w)
        # congestion, not policy: the other pushes the server handled with yours (a push the sync
        # policy holds is not a queue in front of the next one)
        busy = max(0, just_arrived - 1)
        stop = checkpoint and self.checkpoints.cut.stop
        flags = (Flag.CHECKPOINT if checkpoint else 0) | (Flag.STOP if stop else 0)
        collect: list[int] = []
        if self.checkpoints is not None:
            # with checkpoints on, a finishing worker's final state is kept for later checkpoints
            collect = self.checkpoints.collect(released, [bool(book.last_push[w]) for w in released], now)
        sends = []
        for w in released:
            answer = self._answer(w, now, busy, flags | (Flag.CHECKPOINT if w in collect else 0))
            sends.append(Send(answer, self.params[self.keys]))
            book.record_release(w)
        self._stop_now = stop
        listen = [s.answer.w for s in sends if self._keeps_serving(s.answer.w)]
        if self.ops is not None:
            self.ops.extend((Op.REPLY, w, int(w in listen)) for w in released)
        return self._outcome(replies=sends, free=list(released), listen=listen, collect=collect)

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

    def _keeps_serving(self, w: int) -> bool:
        """Whether the transport should listen for worker w's next push after answering it."""
        return bool(self.book.active[w]) and not self._stop_now

    def on_entries(self, entries: dict[int, dict], now: float) -> Outcome:
        """The checkpoint entries an outcome's ``collect`` listed are in: if they complete a cut,
        write it (every server writes its own range: nothing is gathered)."""
        if self.checkpoints is not None:
            self.checkpoints.entries_in(entries)
            cut = self.checkpoints.write(now, int(self.stats.steps.sum()), self._part())
            if cut is not None:
                self.stopped = cut.stop
        return self._outcome()

    def _part(self) -> ServerPart:
        meta, arrays = self.state()
        unapplied = arrays.pop("unapplied", None)
        return ServerPart(self.params[self.keys], None if unapplied is None else unapplied[self.keys], meta, arrays)

    def on_end(self, now: float) -> Outcome:
        """Serving is over: the transport gathers the other servers' ranges (and what they scaled
        away) into the outcome's ``gather``, then calls :meth:`finish`. Leading several servers,
        the end state's snapshot is taken here, as an op the others replay before the gather."""
        if self.ops is not None and self.recorder is not None:
            self.ops.extend(self._snapshot(now, final=True))
            self._final_snapshot = True
        return self._outcome(gather=None if self.ops is None else self.params)

    def finish(self, now: float, unapplied: np.ndarray | None = None) -> ServerStats:
        """End of serving: final checkpoint and snapshot; returns the stats. ``unapplied``: what
        the other servers scaled away, on their ranges (None: nothing)."""
        st = self.stats
        st.wall_s = now
        if unapplied is not None:
            own = None if st.unapplied is None else st.unapplied[self.keys].copy()
            st.unapplied = unapplied
            if own is not None:
                st.unapplied[self.keys] = own
        if self.checkpoints is not None and not self.stopped:
            self.checkpoints.final(now, self._part())
        if self.recorder is not None and not self._final_snapshot:
            self._snapshot(now, final=True)
        st.policy_report = self.policy.report() if hasattr(self.policy, "report") else None
        st.stopped = self.stopped
        return st

    def assemble_snapshots(self, fill: Callable[[int, np.ndarray], None]) -> int:
        """After the end (leading several servers): make each snapshot of this server's range
        whole, ``fill(i, whole)`` receiving the other servers' pieces of snapshot i; returns how
        many snapshots there are (0 without a recorder or with one server)."""
        if self.recorder is None or self.ops is None:
            return 0
        self.recorder.assemble(self.params.size, self.keys, fill)
        return len(self.recorder)

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
