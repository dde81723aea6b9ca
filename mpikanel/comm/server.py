"""Rank 0: serves the global parameters to the workers over non-blocking point-to-point."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from mpi4py import MPI

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
    unapplied: np.ndarray | None = None   # sum of (1 - scale) * delta: received but scaled away
    policy_report: dict | None = None     # the policy's own record (PSP rounds)


class ParameterServer:
    """Holds the flat float64 parameters and answers pushes as the sync policy releases them.

    One persistent receive per worker (re-armed after each answer) feeds ``Waitsome``,
    which blocks inside MPI, so an idle server yields the CPU under MPICH heavy-yield.
    Replies are ``Isend`` from one preallocated frame per worker.
    """

    def __init__(self, comm: MPI.Comm, params: np.ndarray, policy: SyncPolicy,
                 on_progress: Callable[["ServerStats"], None] | None = None,
                 recorder: SnapshotRecorder | None = None) -> None:
        self.comm = comm
        self.params = params
        self.policy = policy
        self.n_workers = comm.Get_size() - 1
        self.book = Book(self.n_workers)
        n = params.size
        self._inbox = [Frame.allocate(n) for _ in range(self.n_workers)]
        self._outbox = [Frame.allocate(n) for _ in range(self.n_workers)]
        self._recv = [comm.Recv_init([f.buf, MPI.BYTE], source=w + 1, tag=Tag.PUSH)
                      for w, f in enumerate(self._inbox)]
        self._send: list[MPI.Request] = [MPI.REQUEST_NULL] * self.n_workers
        self._pending_delta = np.zeros(self.n_workers, dtype=bool)
        self.on_progress = on_progress
        self.recorder = recorder
        nw = self.n_workers
        self.stats = ServerStats(pushes=np.zeros(nw, dtype=np.int64), held_s=np.zeros(nw),
                                 staleness_sum=np.zeros(nw, dtype=np.int64),
                                 staleness_max=np.zeros(nw, dtype=np.int64),
                                 steps=np.zeros(nw, dtype=np.int64))

    def run(self) -> ServerStats:
        """Serve until every worker has sent its last push."""
        t_start = time.perf_counter()
        MPI.Prequest.Startall(self._recv)
        if self.recorder is not None:
            self.recorder.maybe_snapshot(0.0, self.params, 0)
        while not self.book.finished:
            done = MPI.Request.Waitsome(self._recv)
            t0 = time.perf_counter()
            if done is None:
                raise RuntimeError("server: no worker can push and none was released "
                                   f"(policy {self.policy.describe()} stalled)")
            for w in sorted(done):
                self._on_push(w, t0)
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
        if self.recorder is not None:
            self.recorder.final(self.stats.wall_s, self.params, self.book.version)
        return self.stats

    def _on_push(self, w: int, now: float) -> None:
        frame = self._inbox[w]
        h = frame.header
        self.stats.pushes[w] += 1
        self.stats.steps[w] += int(h[H.STEPS])
        self.book.record_push(w, int(h[H.CLOCK]), frame.has(Flag.DONE), float(frame.meta[M.STEP_S]), now,
                              base_version=int(h[H.VERSION]), steps=int(h[H.STEPS]))
        self.policy.on_push(self.book, w)
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

    def _release(self, just_arrived: int) -> None:
        released = self.policy.release(self.book)
        if not released:
            return
        if not self.policy.apply_on_arrival:
            for w in released:          # rank order: bitwise reproducible sums
                self._apply(w)
        now = time.perf_counter()
        busy = self.book.n_waiting - len(released) + just_arrived - 1   # queue besides you
        for w in released:
            self._reply(w, now, busy)
            self.book.record_release(w)
            if self.book.active[w]:
                self._recv[w].Start()

    def _reply(self, w: int, now: float, busy: int) -> None:
        self._send[w].Wait()            # the worker got the previous reply before pushing again
        out = self._outbox[w]
        out.header[H.CLOCK] = self.book.clock[w]
        out.header[H.VERSION] = self.book.version
        out.header[H.PLAN] = self.policy.plan(self.book, w)
        out.header[H.BUSY] = busy
        out.header[H.FLAGS] = 0
        held = now - self.book.arrived_at[w]
        out.meta[M.HELD_S] = held
        self.stats.held_s[w] += held
        out.payload[:] = self.params
        self._send[w] = self.comm.Isend([out.buf, MPI.BYTE], dest=w + 1, tag=Tag.REPLY)
