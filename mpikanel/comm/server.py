"""Rank 0: moves push and reply frames for the server core over non-blocking point-to-point.

Every decision lives in :class:`mpikanel.engine.server_core.ServerCore`; this loop only waits
for frames (``Waitsome`` over a pool of persistent ``ANY_SOURCE`` receives, which blocks inside
MPI so an idle server yields the CPU), decodes them, and performs the
:class:`~mpikanel.engine.outcome.Outcome` each core call answers with (``Isend`` its replies,
free its frames, forward its ops, collect its checkpoint entries). The pool
(:class:`mpikanel.comm.pushpool.PushPool`) holds as many frames as pushes are held or landing,
not one per worker: a buffer goes back to the pool once its delta is applied (at once under
ASP, SSP and ESP; at the round's release under BSP and PSP), and a push that finds no posted
buffer waits in MPI. Under flow control (``flow``: large pushes, mpikanel.engine.flow) it waits
at its worker instead: the worker asks, and sends once a frame is posted for it
(:class:`mpikanel.comm.pushpool.GrantedPool`).

A dense reply is two messages, the worker's small header block (REPLY) and its range read in place from a read-only snapshot of the parameters that every reply
at the same version shares (REPLY_DATA; :class:`ReplySnapshots`), so the server holds a few
parameter copies, not one per worker. (One message joining both through an hindexed datatype
was tried first: Intel MPI packs such a send into a temporary copy of its own, 8 MB per pending
reply at 1M parameters.) With sparse frames (``--push``) a reply is one hindexed message of the
header, the keys the core chose and their values (small), or of the header and the snapshot
(:class:`Traffic`). With ``probes`` (ESP)
it also keeps one persistent receive per worker for header-only PROBE frames and answers each
at once, before the pushes that arrived with it (so a probe also sees them queued).

With several servers (``ServerMap``) this is server 0, the one that decides: its core keeps the
book for all of them, and every apply and answer it makes is replayed on servers 1..K-1
(:class:`mpikanel.comm.follower.FollowerServer`) through small CONTROL messages of ops; they send
their key ranges back only at the end, and write their own parts of a checkpoint. The loss curve's
snapshots are taken in pieces: server 0 copies its range and sends an ``Op.SNAPSHOT`` with its
thinning decisions, each other server copies its range at the same point of the op order, and
the pieces come to server 0 once, after the END op (nothing is gathered while serving).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..engine.arrivals import BACKOFF, PAUSE_MIN_S, ArrivalForecast
from ..engine.flow import FLOW_SNAPSHOTS, polls_for_granted
from ..engine.outcome import Outcome, Send
from ..engine.server_core import Push, ServerCore, ServerStats
from ..hetero import sleep_for
from ..engine.servermap import ServerMap
from ..engine.sparse import capacity
from ..summary import peak_rss_mb
from .pushpool import push_pool
from .waits import wait_all, wait_some
from ..engine.messages import OP_INTS, Flag, Frame, H, M, Op, Tag, control_ints, write_answer

__all__ = ["ParameterServer", "ReplySnapshots", "ServerStats"]


class ReplySnapshots:
    """Read-only copies of the parameters replies are sent from: one per version, shared by every
    reply at that version, recycled once all the sends that read it have completed; at most
    ``limit`` of them (None: no bound), the oldest one's sends waited for before another is taken."""

    def __init__(self, n_params: int, limit: int | None = None) -> None:
        self.n_params, self.limit = n_params, limit
        self.version = -1
        self.current: np.ndarray | None = None
        self.sends: list[MPI.Request] = []
        self.retired: list[tuple[np.ndarray, list[MPI.Request]]] = []
        self.free: list[np.ndarray] = []
        self.peak = 0

    def get(self, version: int, params: np.ndarray) -> np.ndarray:
        """The snapshot of `params` at `version` (a new copy when the version moved on)."""
        if self.current is not None and version == self.version:
            return self.current
        if self.current is not None:
            self.retired.append((self.current, self.sends))
        self._reclaim()
        while self.limit is not None and len(self.retired) >= self.limit:
            wait_all(self.retired[0][1])        # its workers are receiving it: they posted the receive
            self._reclaim()
        buf = self.free.pop() if self.free else np.empty(self.n_params)
        np.copyto(buf, params)
        self.current, self.sends, self.version = buf, [], version
        self.peak = max(self.peak, 1 + len(self.retired))
        return buf

    def sent(self, request: MPI.Request) -> None:
        """A send reading the current snapshot was started."""
        self.sends.append(request)

    def _reclaim(self) -> None:
        busy = []
        for buf, sends in self.retired:
            if MPI.Request.Testall(sends):      # also completes them for the per-worker send slots
                self.free.append(buf)
            else:
                busy.append((buf, sends))
        self.retired = busy


#: bound on one small pickled message (a checkpoint part's manifest entry, a server's report)
SMALL_MESSAGE = 1 << 16      # a manifest entry is ~300 bytes, a server report ~1 kB


def receive_all(comm: MPI.Comm, sources: list[int], tag: Tag) -> list:
    """One small pickled message from each source (rank order), waited for inside MPI: a blocking
    ``comm.recv`` probes in a loop that keeps a core busy under Intel MPI (measured: 100% of a
    core, against 34% for a posted receive), starving the ranks that are writing their parts."""
    return MPI.Request.waitall([comm.irecv(bytearray(SMALL_MESSAGE), source=s, tag=tag) for s in sources])


def server_report(rank: int, keys: slice, pushes: int, traffic: "Traffic", busy_s: float, wall_s: float) -> dict:
    """One server rank's line in the summary: its range, load, bytes and memory."""
    return {"rank": rank, "keys": [keys.start, keys.stop], "pushes": pushes, "bytes_received": traffic.received,
            "bytes_sent": traffic.sent, "busy_s": busy_s, "busy_us_per_push": 1e6 * busy_s / max(1, pushes),
            "wall_s": wall_s, "peak_rss_mb": peak_rss_mb(), "push_buffers": len(traffic.pool.frames),
            "flow_control": traffic.flow,
            "reply_snapshots_peak": traffic.snapshots.peak}


class Traffic:
    """One server rank's side of the push/pull traffic: frames in, replies out (dense or SPARSE)."""

    def __init__(self, comm: MPI.Comm, n_workers: int, first: int, n: int, mode: str,
                 backoff: float = BACKOFF, flow: bool = False) -> None:
        self.comm, self.first, self.n = comm, first, n
        self.flow = flow
        self.pool = push_pool(comm, first, capacity(mode, n), n_workers, flow)
        self.outbox = [Frame.allocate(0) for _ in range(n_workers)]     # header + meta only
        self.snapshots = ReplySnapshots(n, FLOW_SNAPSHOTS if flow else None)
        self.split = mode == "dense"    # dense replies as header + contiguous range (worker.SlicedFrame)
        self.sends: list[MPI.Request] = [MPI.REQUEST_NULL] * n_workers
        self.data_sends: list[MPI.Request] = [MPI.REQUEST_NULL] * n_workers
        self._kept: list = [None] * n_workers    # a sparse reply's keys and values, until it is sent
        self.received = self.sent = 0
        self.forecast = ArrivalForecast(n_workers, backoff)     # when each worker's next push is due (the waits)

    def arrived(self, w: int) -> tuple[Frame, np.ndarray | None, np.ndarray]:
        """Worker w's push frame, its keys (None: dense) and values; counts its bytes."""
        frame = self.pool.frame(w)
        self.received += frame.nbytes(self.n)
        keys, values = frame.entries(self.n)
        return frame, keys, values

    def landed(self, indices: list[int], statuses: list[MPI.Status]) -> list[int]:
        """The pool's completed receives in: the workers whose pushes landed (rank order). The arrival
        forecast learns when what the server waits for came: the asks under flow control, else the pushes."""
        pushes = self.pool.landed(indices, statuses)
        now = time.perf_counter()
        for w in self.pool.asked if self.flow else pushes:
            self.forecast.arrived(w, now)
        return pushes

    def pause(self, now: float, waited_s: float) -> float:
        """How long a waiting server sleeps between tests (mpikanel.comm.waits.wait_some)."""
        if self.flow and polls_for_granted(self.pool.grants.granted, now - self.pool.last_go):
            return PAUSE_MIN_S
        return self.forecast.pause(now, waited_s)

    def wait_sent(self) -> None:
        """Complete every reply still being sent (the end of the run)."""
        MPI.Request.Waitall(self.sends + self.data_sends)

    def header(self, w: int) -> Frame:
        """Worker w's reply header to fill in, once its previous reply has been sent."""
        self.sends[w].Wait()            # the worker got the previous reply before pushing again
        return self.outbox[w]

    def reply(self, w: int, version: int, params: np.ndarray, keys: np.ndarray | None) -> None:
        """Send the header filled in from :meth:`header` with the range ``params`` at `version`:
        whole, from the snapshot every reply at that version shares, or only at ``keys`` (SPARSE)."""
        out = self.outbox[w]
        dest = w + self.first
        self.forecast.replied(w, time.perf_counter())
        if keys is None and self.split:
            snapshot = self.snapshots.get(version, params)
            self.sent += out.buf.nbytes + snapshot.nbytes
            self.sends[w] = self.comm.Isend([out.buf, MPI.BYTE], dest=dest, tag=Tag.REPLY)
            self.data_sends[w].Wait()       # long done: the worker took it before pushing again
            self.data_sends[w] = self.comm.Isend([snapshot, MPI.DOUBLE], dest=dest, tag=Tag.REPLY_DATA)
            self.snapshots.sent(self.data_sends[w])
            return
        if keys is None:
            out.header[H.FLAGS] &= ~Flag.SPARSE
            blocks = [out.buf, self.snapshots.get(version, params)]
            self._kept[w] = None
        else:
            out.header[H.FLAGS] |= Flag.SPARSE
            out.header[H.NNZ] = keys.size
            blocks = [out.buf] + ([keys, params[keys]] if keys.size else [])
            self._kept[w] = blocks
        nbytes = [b.nbytes for b in blocks]
        self.sent += sum(nbytes)
        # one message in the frame layout, read from where its parts are: no copy into a frame
        joined = MPI.BYTE.Create_hindexed(nbytes, [MPI.Get_address(b) for b in blocks]).Commit()
        try:
            self.sends[w] = self.comm.Isend([MPI.BOTTOM, 1, joined], dest=dest, tag=Tag.REPLY)
        finally:
            joined.Free()               # allowed while the send is pending: MPI frees it afterwards
        if keys is None:
            self.snapshots.sent(self.sends[w])


class ParameterServer:
    """The MPI transport of a ServerCore: server ranks 0..K-1, then workers 0..N-1 (rank K + w).

    It calls the core once per event and performs the :class:`Outcome` it gets back (replies,
    frames to free, ops for the other servers, entries to collect); it never reads the core's members."""

    def __init__(self, comm: MPI.Comm, core: ServerCore, probes: bool = False,
                 servers: ServerMap | None = None, backoff: float = BACKOFF, flow: bool = False) -> None:
        """Frames are sized by the core's shape (its push mode: mpikanel.engine.sparse); ``backoff``:
        the waits' pause as a fraction of the time waited (mpikanel.engine.arrivals.backoff_for);
        ``flow``: pushes ask first (mpikanel.engine.flow; the workers must agree)."""
        self.comm = comm
        self.core = core
        n_params, nw, push_mode = core.shape()
        smap = servers if servers is not None else ServerMap(n_params, 1)
        self.smap = smap
        self.first = first = smap.first_worker()
        keys = smap.range(0)
        n = keys.stop - keys.start
        self._traffic = Traffic(comm, nw, first, n, push_mode, backoff, flow)
        self._probe_in = [Frame.allocate(0) for _ in range(nw)] if probes else []
        self._probe_out = [Frame.allocate(0) for _ in range(nw)] if probes else []
        self._probe_recv = [comm.Recv_init([f.buf, MPI.BYTE], source=w + first, tag=Tag.PROBE)
                            for w, f in enumerate(self._probe_in)]
        self._probe_send: list[MPI.Request] = [MPI.REQUEST_NULL] * len(self._probe_recv)
        self._probe_posted = [False] * len(self._probe_recv)
        self._listening = 0             # workers whose next push the server waits for
        self._t_start = 0.0
        self._followers = list(range(1, smap.servers))
        self._ops: list[tuple[int, int, int]] = []     # ops for the other servers, not yet sent
        self._control = np.zeros(control_ints(nw), dtype=np.int64)
        self._control_sends: list[MPI.Request] = []
        self._ended = False
        if self._followers:
            core.lead(keys, self)

    def run(self) -> ServerStats:
        """Serve until every worker has sent its last push (or a stop checkpoint ends the run)."""
        core = self.core
        self._t_start = time.perf_counter()
        out = core.start(0.0)
        self._ops += out.ops            # the first snapshot (several servers)
        self._arm(out.listen)
        done = out.stop
        pool = self._traffic.pool
        while not done:
            arrived = self._next()
            t0 = time.perf_counter()
            if arrived is None:
                raise RuntimeError("server: no worker can push and none was released "
                                   f"(policy {core.describe()} stalled)")
            pushes, probes = arrived
            for w in probes:
                self._answer_probe(w, len(pushes) + pool.queued)
            self._listening -= len(pushes)
            for w in pushes:
                t_push = time.perf_counter()
                received = self._traffic.received
                out = core.on_push(self._decode(w), self._now())
                sleep_for(out.sleep_s)
                core.on_served(time.perf_counter() - t_push, self._traffic.received - received, self._now())
                self._perform(out)
            out = self._perform(core.on_tick(self._now()))
            self._flush()               # the other servers answer too (a worker waits for all of them)
            if out.collect or out.cut:
                entries = receive_all(self.comm, [w + self.first for w in out.collect], Tag.STATE)
                out = self._perform(core.on_entries(dict(zip(out.collect, entries)), self._now()))
                self._flush()
            done = out.stop
            core.on_load(busy_s=time.perf_counter() - t0)
        self._traffic.wait_sent()
        pool.close()
        for w, req in enumerate(self._probe_recv):    # still posted: no worker probes after its last push
            if self._probe_posted[w]:   # never, for a worker that had left before the checkpoint resumed
                req.Cancel()
                req.Wait()
            req.Free()
        MPI.Request.Waitall(self._probe_send)
        now = self._now()
        end = core.on_end(now)
        self._ops += end.ops
        # the other servers' final ranges, and parts of the last checkpoint
        stats = core.finish(now, None if end.gather is None else self._gather(end.gather, True))
        stats.reply_snapshots_peak = self._traffic.snapshots.peak
        stats.push_buffers = len(pool.frames)
        reports = self._end_followers()
        self._snapshots_in(reports)
        own = server_report(0, self.smap.range(0), int(stats.pushes.sum()), self._traffic, stats.busy_s, stats.wall_s)
        stats.servers = [own] + reports
        return stats

    def _perform(self, out: Outcome) -> Outcome:
        """Send an outcome's replies, free its frames, listen, queue its ops, gather if asked."""
        pool = self._traffic.pool
        for send in out.replies:
            self._reply(send)
        for w in out.free:
            pool.release(w)     # applied (or carried none): the frame takes the next push
        self._listening += len(out.listen)
        self._ops += out.ops          # sent in order at the next flush
        return out

    # --- the other servers (K > 1) ---------------------------------------------------------------

    def _flush(self) -> None:
        """Send the ops queued since the last flush to every other server, in order."""
        ops = self._ops
        if not ops:
            return
        buf = self._control
        per = (buf.size - 1) // OP_INTS
        for i in range(0, len(ops), per):
            MPI.Request.Waitall(self._control_sends)    # the buffer is reused
            chunk = ops[i:i + per]
            buf[0] = len(chunk)
            buf[1: 1 + OP_INTS * len(chunk)] = np.asarray(chunk, dtype=np.int64).ravel()
            self._control_sends = [self.comm.Isend([buf, MPI.INT64_T], dest=k, tag=Tag.CONTROL)
                                   for k in self._followers]
        ops.clear()

    def _gather(self, params: np.ndarray, with_unapplied: bool) -> np.ndarray | None:
        """Fill the other servers' key ranges of `params`; with_unapplied: also what they scaled
        away, on their ranges of a new vector (None when they scaled nothing away)."""
        if self._ended:
            return None
        self._ops.append((Op.SLICE, 0, int(with_unapplied)))
        self._flush()
        unapplied = None
        for k in self._followers:
            keys = self.smap.range(k)
            self.comm.Recv([params[keys], MPI.DOUBLE], source=k, tag=Tag.SLICE)
            if with_unapplied:
                part = np.empty(keys.stop - keys.start)
                self.comm.Recv([part, MPI.DOUBLE], source=k, tag=Tag.SLICE)
                if part.any() and unapplied is None:
                    unapplied = np.zeros_like(params)
                if unapplied is not None:
                    unapplied[keys] = part
        return unapplied

    def begin_parts(self, seq: int) -> Callable[[], list[dict]]:
        """Have the other servers write their parts of checkpoint `seq`; returns the wait for
        their manifest entries (so server 0 writes its own part meanwhile)."""
        self._ops.append((Op.CHECKPOINT, 0, seq))
        self._flush()
        return lambda: receive_all(self.comm, self._followers, Tag.STATE)

    def _end_followers(self) -> list[dict]:
        """Tell the other servers the run is over (their final ranges are in); take their reports."""
        if not self._followers:
            return []
        self._ops.append((Op.END, 0, 0))
        self._flush()
        reports = receive_all(self.comm, self._followers, Tag.SERVER_STATS)
        MPI.Request.Waitall(self._control_sends)
        self._ended = True
        return reports

    def _snapshots_in(self, reports: list[dict]) -> None:
        """The other servers' pieces of the loss-curve snapshots, sent after their reports: make
        server 0's snapshots whole (the end of the run, off the serving path)."""
        held = [int(r.pop("snapshots", 0)) for r in reports]

        def fill(i: int, whole: np.ndarray) -> None:
            for k, n in zip(self._followers, held):
                if i >= n:
                    raise RuntimeError(f"server {k} kept {n} snapshot pieces, server 0 more")
                self.comm.Recv([whole[self.smap.range(k)], MPI.FLOAT], source=k, tag=Tag.SNAPSHOT)

        n = self.core.assemble_snapshots(fill)
        if any(h != n for h in held):
            raise RuntimeError(f"snapshot pieces per server {held} do not match server 0's {n}")

    def _arm(self, workers: list[int]) -> None:
        """Start listening to these workers (every active one)."""
        for w in workers:
            self._listening += 1
            if self._probe_recv:
                self._probe_recv[w].Start()
                self._probe_posted[w] = True

    def _next(self) -> tuple[list[int], list[int]] | None:
        """The workers whose pushes, and whose probes, arrived (blocks inside MPI); None when
        nothing can arrive (probes alone never end a stall: no push can move it)."""
        if not self._listening:
            return None
        pool = self._traffic.pool
        pool.ensure()
        n = len(pool.requests)
        statuses: list[MPI.Status] = []
        done = self._wait_some(pool.requests + self._probe_recv, statuses)
        pushed = [(i, st) for i, st in zip(done, statuses) if i < n]
        pushes = self._traffic.landed([i for i, _ in pushed], [st for _, st in pushed])
        return pushes, sorted(i - n for i in done if i >= n)

    def _wait_some(self, requests: list[MPI.Request], statuses: list[MPI.Status]) -> list[int]:
        """Block inside MPI until some requests complete; their indices (statuses filled alike)."""
        return wait_some(requests, statuses, self._traffic.pause)

    def _answer_probe(self, w: int, queued: int) -> None:
        """Answer worker w's probe at once with what a push would meet now, and listen again."""
        t0 = time.perf_counter()
        self._probe_send[w].Wait()
        p = self.core.on_probe(w, queued)
        out = self._probe_out[w]
        out.header[H.VERSION], out.header[H.BUSY] = p.version, p.queued
        out.meta[M.SERVICE_S], out.meta[M.RECV_BPS], out.meta[M.UPDATE_NORM] = p.service_s, p.recv_bps, p.update_norm
        self._probe_send[w] = self.comm.Isend([out.buf, MPI.BYTE], dest=w + self.first, tag=Tag.PROBE_REPLY)
        self._probe_recv[w].Start()
        self.core.on_load(probe_s=time.perf_counter() - t0)

    def _now(self) -> float:
        return time.perf_counter() - self._t_start

    def _decode(self, w: int) -> Push:
        frame, keys, values = self._traffic.arrived(w)
        h = frame.header
        return Push(w, int(h[H.CLOCK]), int(h[H.STEPS]), int(h[H.SAMPLES]), int(h[H.VERSION]),
                    float(frame.meta[M.STEP_S]), last=frame.has(Flag.DONE),
                    stop_request=frame.has(Flag.STOP_REQUEST),
                    delta=values if frame.has(Flag.HAS_DELTA) else None, keys=keys)

    def _reply(self, send: Send) -> None:
        a = send.answer
        write_answer(self._traffic.header(a.w), a)
        self._traffic.reply(a.w, a.version, send.params, a.keys)
