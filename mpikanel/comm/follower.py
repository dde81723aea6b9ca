"""Server ranks 1..K-1: apply and answer exactly as server 0 decides, on their own key range.

Each receives the workers' slices into a pool of frames (:class:`mpikanel.comm.pushpool.PushPool`,
or its flow-controlled :class:`~mpikanel.comm.pushpool.GrantedPool`; a frame is held from a
push's arrival until server 0's REPLY op for it) and keeps one persistent receive for server 0's
CONTROL messages; :class:`mpikanel.engine.follower_core.FollowerCore`
orders the ops against the pushes (and keeps this range of the loss-curve snapshots, which go to
server 0 after the END op). Replies carry the range from a shared per-version snapshot, like server 0's.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..engine.arrivals import BACKOFF
from ..engine.follower_core import Action, FollowerCore
from ..hetero import ServerDelay, sleep_for
from .waits import wait_some
from ..engine.servermap import ServerMap
from ..engine.messages import H, Op, Tag, control_ints
from .server import Traffic, server_report

PRIMARY = 0


class FollowerServer:
    """Server rank k > 0 of a ServerMap: replays server 0's ops on ``params[smap.range(k)]``."""

    def __init__(self, comm: MPI.Comm, params: np.ndarray, smap: ServerMap, n_workers: int,
                 service: ServerDelay | None = None, push_mode: str = "dense",
                 write_part: Callable[[int, np.ndarray, np.ndarray | None], dict] | None = None,
                 unapplied: np.ndarray | None = None, backoff: float = BACKOFF, flow: bool = False) -> None:
        """``write_part(seq, range, unapplied)`` writes this rank's part of checkpoint seq (its manifest
        entry); ``unapplied``: what the run resumed from had scaled away (the whole vector); ``backoff``:
        the waits' (mpikanel.engine.arrivals.backoff_for); ``flow``: pushes ask first
        (mpikanel.engine.flow)."""
        self.comm = comm
        self.write_part = write_part
        self.rank = comm.Get_rank()
        self.keys = smap.range(self.rank)
        self.first = smap.first_worker()
        self.core = FollowerCore(params[self.keys], n_workers, push_mode,
                                 None if unapplied is None else unapplied[self.keys].copy())
        self.service = service
        n = self.keys.stop - self.keys.start
        self._traffic = Traffic(comm, n_workers, self.first, n, push_mode, backoff, flow)
        self._delta: list = [None] * n_workers     # (keys, values) of each worker's waiting push
        self._control = np.zeros(control_ints(n_workers), dtype=np.int64)
        self._control_recv = comm.Recv_init([self._control, MPI.INT64_T], source=PRIMARY, tag=Tag.CONTROL)
        self._pushes = 0
        self._busy_s = 0.0
        self._slices = 0            # ranges sent to server 0 (the end's gather only: snapshots go in pieces)

    def run(self) -> None:
        """Serve until server 0 says END (after which its stats and final range have been sent)."""
        t_start = time.perf_counter()
        self._control_recv.Start()
        core, pool = self.core, self._traffic.pool
        ended = False
        while not ended:
            pool.ensure()       # a frame stays posted while one is free: any worker may push
            n = len(pool.requests)
            statuses: list[MPI.Status] = []
            done = wait_some(pool.requests + [self._control_recv], statuses, self._traffic.pause)
            t0 = time.perf_counter()
            pushed = [(i, st) for i, st in zip(done, statuses) if i < n]
            for w in self._traffic.landed([i for i, _ in pushed], [st for _, st in pushed]):
                self._arrived(w)
            if n in done:
                core.add_ops(self._control)
                self._control_recv.Start()
            while (action := core.next()) is not None:
                self._do(action, time.perf_counter() - t_start)
                ended = ended or action.op is Op.END
            self._busy_s += time.perf_counter() - t0
        self._traffic.wait_sent()
        pool.close()
        if not self._control_recv.Test():   # completes nothing: server 0 sends no more ops
            self._control_recv.Cancel()
            self._control_recv.Wait()
        self._control_recv.Free()

    def _arrived(self, w: int) -> None:
        self._pushes += 1
        _, keys, values = self._traffic.arrived(w)
        self._delta[w] = (keys, values)
        if self.service is not None:
            sleep_for(self.service.draw(self._pushes - 1))
        self.core.push_arrived(w)

    def _do(self, action: Action, now: float) -> None:
        op, w = action.op, action.w
        if op is Op.APPLY:
            keys, values = self._delta[w]
            self.core.apply(values, float(action.arg), keys)
        elif op is Op.REPLY:
            out = self._traffic.header(w)
            out.header[H.VERSION] = action.version
            out.header[H.FLAGS] = 0
            self._traffic.reply(w, action.version, action.params, action.keys)
            self._traffic.pool.release(w)
        elif op is Op.SLICE:
            self._slices += 1
            self.comm.Send([action.params, MPI.DOUBLE], dest=PRIMARY, tag=Tag.SLICE)
            if action.arg:
                scaled = action.unapplied if action.unapplied is not None else np.zeros_like(action.params)
                self.comm.Send([scaled, MPI.DOUBLE], dest=PRIMARY, tag=Tag.SLICE)
        elif op is Op.CHECKPOINT:
            part = self.write_part(int(action.arg), action.params, action.unapplied)
            self.comm.send(part, dest=PRIMARY, tag=Tag.STATE)
        elif op is Op.END:
            report = server_report(self.rank, self.keys, self._pushes, self._traffic, self._busy_s, now)
            report["deltas_applied"] = action.deltas_applied
            report["slices_sent"] = self._slices
            pieces = self.core.snapshots.pieces
            report["snapshots"] = len(pieces)
            self.comm.send(report, dest=PRIMARY, tag=Tag.SERVER_STATS)
            while pieces:               # oldest first; server 0 makes each snapshot whole as it comes
                self.comm.Send([pieces.pop(0), MPI.FLOAT], dest=PRIMARY, tag=Tag.SNAPSHOT)
