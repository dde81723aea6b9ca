"""Rank 0: serves the global parameters to the workers over non-blocking point-to-point."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..budget import Budget
from ..checkpoint import CheckpointControl
from ..hetero import ServerDelay, sleep_for
from ..metrics import SnapshotRecorder
from ..sync import Book, SyncPolicy
from .protocol import Flag, Frame, H, M, Tag


@dataclass
class ServerStats:
    """What the server counted while serving."""

    pushes: np.ndarray            # pushes received per worker
    deltas_applied: int = 0       # deltas added to the global parameters
    held_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # seconds pushes were held per worker
    busy_s: float = 0.0           # seconds spent handling pushes (not waiting in MPI)
    wall_s: float = 0.0
    staleness_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))  # versions behind, per worker
    staleness_max: np.ndarray = field(default_factory=lambda: np.zeros(0))
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))          # local steps pushed
    samples: np.ndarray = field(default_factory=lambda: np.zeros(0))        # training samples pushed
    service_s: float = 0.0                # injected server service time (--server-delay)
    clock_spread_max: int = 0             # most pushes the fastest active worker was ahead of the slowest
    unapplied: np.ndarray | None = None   # sum of (1 - scale) * delta: received but scaled away
    policy_report: dict | None = None     # the policy's own record (PSP rounds)
    stopped: bool = False                 # ended early after a stop checkpoint


class ParameterServer:
    """Holds the flat float64 parameters and answers pushes as the sync policy releases them.

    One persistent receive per worker (re-armed after each answer) feeds ``Waitsome``,
    which blocks inside MPI, so an idle server yields the CPU under MPICH heavy-yield.
    Replies are ``Isend`` from one preallocated frame per worker.
    """

    def __init__(self, comm: MPI.Comm, params: np.ndarray, policy: SyncPolicy,
                 on_progress: Callable[["ServerStats"], None] | None = None,
                 recorder: SnapshotRecorder | None = None,
                 checkpoints: CheckpointControl | None = None, budget: Budget | None = None,
                 service: ServerDelay | None = None) -> None:
        self.comm = comm
        self.params = params
        self.policy = policy
        self.n_workers = comm.Get_size() - 1
        self.book = Book(self.n_workers)
        self.budget = budget if budget is not None else Budget(self.n_workers, None, 1)
        self.service = service
        n = params.size
        self._inbox = [Frame.allocate(n) for _ in range(self.n_workers)]
        self._outbox = [Frame.allocate(n) for _ in range(self.n_workers)]
        self._recv = [comm.Recv_init([f.buf, MPI.BYTE], source=w + 1, tag=Tag.PUSH)
                      for w, f in enumerate(self._inbox)]
        self._send: list[MPI.Request] = [MPI.REQUEST_NULL] * self.n_workers
        self._pending_delta = np.zeros(self.n_workers, dtype=bool)
        self.on_progress = on_progress
        self.recorder = recorder
        self.checkpoints = checkpoints
        self.worker_states: dict[int, dict] = {}   # latest resumable state of each worker
        self.stopped = False                       # ended early by a stop request (checkpointed)
        self._ckpt_reason: str | None = None       # a checkpoint round is pending
        self._stop_after_ckpt = False
        self._t_start = 0.0
        nw = self.n_workers
        self.stats = ServerStats(pushes=np.zeros(nw, dtype=np.int64), held_s=np.zeros(nw),
                                 staleness_sum=np.zeros(nw, dtype=np.int64),
                                 staleness_max=np.zeros(nw, dtype=np.int64),
                                 steps=np.zeros(nw, dtype=np.int64), samples=np.zeros(nw, dtype=np.int64))

    def run(self) -> ServerStats:
        """Serve until every worker has sent its last push."""
        t_start = self._t_start = time.perf_counter()
        for w in range(self.n_workers):
            if self.book.active[w]:
                self._recv[w].Start()
        if self.recorder is not None:
            self.recorder.maybe_snapshot(0.0, self.params, self.book.version)
        while not self.book.finished and not self.stopped:
            done = MPI.Request.Waitsome(self._recv)
            t0 = time.perf_counter()
            if done is None:
                raise RuntimeError("server: no worker can push and none was released "
                                   f"(policy {self.policy.describe()} stalled)")
            for w in sorted(done):
                self._on_push(w)
            self._maybe_schedule_checkpoint(t0 - t_start)
            self._release(len(done))
            if self.recorder is not None:
                self.recorder.maybe_snapshot(t0 - t_start, self.params, self.book.version)
            self.stats.busy_s += time.perf_counter() - t0
            if self.on_progress is not None:
                self.on_progress(self.stats)
        MPI.Request.Waitall(self._send)
        for req in self._recv:          # all inactive now: every worker's last push was answered
            req.Free()
        self.stats.wall_s = time.perf_counter() - t_start
        if self.checkpoints is not None and not self.stopped:
            self.checkpoints.write(self, "end", final=True)
        if self.recorder is not None:
            self.recorder.final(self.stats.wall_s, self.params, self.book.version)
        return self.stats

    def _on_push(self, w: int) -> None:
        frame = self._inbox[w]
        h = frame.header
        if self.service is not None:        # a congested server: service time per push handled
            delay = self.service.draw(int(self.stats.pushes.sum()))
            sleep_for(delay)
            self.stats.service_s += delay
        now = time.perf_counter()
        self.stats.pushes[w] += 1
        self.stats.steps[w] += int(h[H.STEPS])
        self.stats.samples[w] += int(h[H.SAMPLES])
        self.budget.on_push(w, int(h[H.SAMPLES]), now - self._t_start)
        self.book.record_push(w, int(h[H.CLOCK]), frame.has(Flag.DONE), float(frame.meta[M.STEP_S]), now,
                              base_version=int(h[H.VERSION]), steps=int(h[H.STEPS]))
        self.policy.on_push(self.book, w)
        active = self.book.clock[self.book.active]
        if active.size:
            self.stats.clock_spread_max = max(self.stats.clock_spread_max, int(active.max() - active.min()))
        if frame.has(Flag.STOP_REQUEST):
            self._stop_after_ckpt = True
        self._pending_delta[w] = frame.has(Flag.HAS_DELTA)
        if self.policy.apply_on_arrival:
            self._apply(w)

    def _apply(self, w: int) -> None:
        if not self._pending_delta[w]:
            return
        delta = self._inbox[w].payload
        tau = max(0, self.book.version - int(self.book.base_version[w]))
        self.stats.staleness_sum[w] += tau
        self.stats.staleness_max[w] = max(self.stats.staleness_max[w], tau)
        scale = self.policy.delta_scale(self.book, w)
        if scale != 1.0:
            if self.stats.unapplied is None:
                self.stats.unapplied = np.zeros_like(self.params)
            self.stats.unapplied += (1.0 - scale) * delta
            delta *= scale              # the inbox frame is ours until the receive is re-armed
        self.params += delta
        self._pending_delta[w] = False
        self.stats.deltas_applied += 1
        self.book.version += 1

    def _maybe_schedule_checkpoint(self, elapsed_s: float) -> None:
        ctl = self.checkpoints
        if ctl is None or self._ckpt_reason is not None:
            return
        if ctl.stop_requested():
            self._stop_after_ckpt = True
        if self._stop_after_ckpt:
            self._ckpt_reason = "stop"
        else:
            self._ckpt_reason = ctl.due(elapsed_s, int(self.stats.steps.sum()))

    def _release(self, just_arrived: int) -> None:
        released = self.policy.release(self.book)
        checkpoint = self._ckpt_reason is not None
        if checkpoint:
            # a consistent cut: hold everyone until every active worker has pushed, then
            # answer all of them with CHECKPOINT and collect their states
            if (self.book.active & ~self.book.waiting).any():
                return
            released = sorted(set(released) | {int(w) for w in np.flatnonzero(self.book.waiting)})
        if not released:
            return
        if not self.policy.apply_on_arrival:
            for w in released:          # rank order: bitwise reproducible sums
                self._apply(w)
        now = time.perf_counter()
        busy = self.book.n_waiting - len(released) + just_arrived - 1   # queue besides you
        stop = checkpoint and self._stop_after_ckpt
        flags = (Flag.CHECKPOINT if checkpoint else 0) | (Flag.STOP if stop else 0)
        # with checkpoints on, a finishing worker's final state is kept for later checkpoints
        collect = [w for w in released if checkpoint or (self.checkpoints is not None and self.book.last_push[w])]
        for w in released:
            self._reply(w, now, busy, flags | (Flag.CHECKPOINT if w in collect else 0))
            self.book.record_release(w)
            if self.book.active[w] and not stop:
                self._recv[w].Start()
        for w in collect:
            self.worker_states[w] = self.comm.recv(source=w + 1, tag=Tag.STATE)
        if checkpoint:
            self.checkpoints.write(self, self._ckpt_reason, final=False)
            self.checkpoints.written(time.perf_counter() - self._t_start, int(self.stats.steps.sum()))
            self._ckpt_reason = None
            self.stopped = stop

    def _reply(self, w: int, now: float, busy: int, flags: int = 0) -> None:
        self._send[w].Wait()            # the worker got the previous reply before pushing again
        out = self._outbox[w]
        out.header[H.CLOCK] = self.book.clock[w]
        out.header[H.VERSION] = self.book.version
        out.header[H.PLAN] = self.policy.plan(self.book, w)
        out.header[H.BUSY] = busy
        if self.book.last_push[w]:
            self.budget.leave(w)
        else:
            speeds = None if self.policy.lockstep else self.book.step_s
            out.header[H.LEASE] = self.budget.renew(w, speeds, self.book.active)
            if self.budget.finish(w):
                flags |= Flag.FINISH
        out.header[H.FLAGS] = flags
        held = now - self.book.arrived_at[w]
        out.meta[M.HELD_S] = held
        self.stats.held_s[w] += held
        out.payload[:] = self.params
        self._send[w] = self.comm.Isend([out.buf, MPI.BYTE], dest=w + 1, tag=Tag.REPLY)

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
        b.clock[:] = arrays["clock"]
        b.active[:] = arrays["active"].astype(bool)
        st.deltas_applied = int(meta["deltas_applied"])
        st.busy_s = float(meta["busy_s"])
        for key in ("pushes", "held_s", "staleness_sum", "staleness_max", "steps", "samples"):
            getattr(st, key)[:] = arrays[key]
        self.budget.restore(meta["budget"])
        if "unapplied" in arrays:
            st.unapplied = np.array(arrays["unapplied"], dtype=np.float64)
        self.policy.restore(meta["policy"])
