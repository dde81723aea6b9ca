"""The server's receives for pushes: frames for what is held or landing, not one per worker.

:class:`PushPool` posts persistent ``ANY_SOURCE`` receives; :class:`GrantedPool` (flow control,
mpikanel.engine.flow) posts a frame for one worker at a time, on its ASK, and tells it GO.
Both give the server loops the same calls: ``ensure`` before waiting on ``requests``, ``landed``
with what completed, ``frame``/``release`` per worker, and ``close``.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..engine.flow import FLOW_FRAMES, POOL_START, Grants
from ..engine.messages import Frame, Tag


class _HeldFrames:
    """Frames holding pushes: which worker's push is in which frame, until it is used up."""

    frames: list[Frame]
    at: np.ndarray              # worker -> the frame holding its push (-1: none)

    def frame(self, w: int) -> Frame:
        """The frame holding worker w's push."""
        return self.frames[int(self.at[w])]

    def release(self, w: int) -> None:
        """Worker w's push is used up: its frame takes the next push."""
        i = int(self.at[w])
        if i < 0:
            return
        self.at[w] = -1
        self._reuse(i)

    def _reuse(self, i: int) -> None:
        raise NotImplementedError


class PushPool(_HeldFrames):
    """Receive buffers for pushes, shared by every worker: persistent ``ANY_SOURCE`` receives on
    as many frames as pushes are held or landing at once, not one frame per worker.

    A worker has at most one push in flight to a server, so a pool of ``n_workers`` frames is
    never full while a push can still arrive: the pool grows (one frame at a time, up to that)
    only when every frame holds a push and the server still listens, as under BSP, whose deltas
    wait for the round. Buffers are handed back with :meth:`release` once their delta is applied.
    """

    def __init__(self, comm: MPI.Comm, first: int, slots: int, n_workers: int, start: int = POOL_START) -> None:
        self.comm, self.first, self.slots, self.n_workers = comm, first, slots, n_workers
        self.frames: list[Frame] = []
        self.requests: list[MPI.Request] = []
        self.at = np.full(n_workers, -1, dtype=np.int64)    # worker -> the frame holding its push
        self.posted = 0
        self.asked: list[int] = []      # no asks: pushes come unannounced
        self.queued = 0         # pushes waiting for a frame are MPI's, not counted (GrantedPool counts its asks)
        for _ in range(max(1, min(start, n_workers))):
            self._grow()

    def _grow(self) -> None:
        frame = Frame.allocate(self.slots)
        req = self.comm.Recv_init([frame.buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=Tag.PUSH)
        req.Start()
        self.frames.append(frame)
        self.requests.append(req)
        self.posted += 1

    def ensure(self) -> None:
        """Post one more buffer if none is posted (call it while a push may still arrive)."""
        if self.posted == 0 and len(self.frames) < self.n_workers:
            self._grow()

    def landed(self, indices: list[int], statuses: list[MPI.Status]) -> list[int]:
        """The workers whose pushes completed these receives (rank order); their frames are held."""
        workers = []
        for i, status in zip(indices, statuses):
            w = status.Get_source() - self.first
            self.at[w] = i
            workers.append(w)
        self.posted -= len(indices)
        return sorted(workers)

    def _reuse(self, i: int) -> None:
        """Post frame i for the next push from anyone."""
        self.requests[i].Start()
        self.posted += 1

    def close(self) -> None:
        """Cancel the posted receives (no worker pushes any more) and free every request."""
        for req in self.requests:
            if not req.Test():          # completes nothing: no worker pushes any more
                req.Cancel()
                req.Wait()
            req.Free()


#: the buffer of header-less messages (ASK, GO): nothing is read or written
NOTHING = np.zeros(1, dtype=np.uint8)


def empty_spec() -> list:
    """The buffer spec of a message with no data."""
    return [NOTHING, 0, MPI.BYTE]


class GrantedPool(_HeldFrames):
    """Flow-controlled receives for pushes: a worker's ASK queues it, a free frame is posted for
    that worker alone (``Irecv`` from its rank) and it is told GO, so no push ever arrives
    unexpected. The decisions are :class:`mpikanel.engine.flow.Grants`'; this moves the messages.

    ``requests`` are the frames' receives (inactive while free or held) followed by one persistent
    ASK receive per worker; ``landed`` takes both and returns the workers whose pushes landed."""

    def __init__(self, comm: MPI.Comm, first: int, slots: int, n_workers: int, start: int = POOL_START) -> None:
        self.comm, self.first, self.slots, self.n_workers = comm, first, slots, n_workers
        self.grants = Grants(max(1, min(start, n_workers)), n_workers)
        self.frames = [Frame.allocate(slots) for _ in range(self.grants.frames)]
        self.receives: list[MPI.Request] = [MPI.REQUEST_NULL] * len(self.frames)
        self.owner = [-1] * len(self.frames)               # frame -> the worker it was posted for
        self.at = np.full(n_workers, -1, dtype=np.int64)    # worker -> the frame holding its push
        self.asks = [comm.Recv_init(empty_spec(), source=first + w, tag=Tag.ASK) for w in range(n_workers)]
        self.gos: list[MPI.Request] = [MPI.REQUEST_NULL] * n_workers
        self.asked: list[int] = []          # the workers whose asks the last ``landed`` took
        self.last_go = 0.0                  # perf_counter() of the last GO sent
        MPI.Prequest.Startall(self.asks)

    @property
    def requests(self) -> list[MPI.Request]:
        """What the server waits on: frame receives, then ASK receives (indices as ``landed`` reads them)."""
        return self.receives + self.asks

    @property
    def queued(self) -> int:
        """Workers that asked to push and were not told GO yet."""
        return len(self.grants.asks)

    def ensure(self) -> None:
        """Grant what can be granted, growing the pool if nothing could land otherwise (before a wait)."""
        self._grant(grow=True)

    def landed(self, indices: list[int], statuses: list[MPI.Status]) -> list[int]:
        """Take completed receives: ASKs queue their workers (and are posted again), pushes hold
        their frames; the workers whose pushes landed (rank order)."""
        nf = len(self.receives)
        workers, self.asked = [], []
        for i in indices:
            if i < nf:
                w = self.owner[i]
                self.at[w] = i
                self.grants.landed()
                workers.append(w)
            else:
                self.grants.asked(i - nf)
                self.asks[i - nf].Start()
                self.asked.append(i - nf)
        self._grant(grow=False)
        return sorted(workers)

    def _reuse(self, i: int) -> None:
        """Frame i goes to the next ask."""
        self.grants.released(i)
        self._grant(grow=False)

    def _grant(self, grow: bool) -> None:
        for w, i in self.grants.grant(grow):
            if i == len(self.frames):
                self.frames.append(Frame.allocate(self.slots))
                self.receives.append(MPI.REQUEST_NULL)
                self.owner.append(-1)
            self.owner[i] = w
            self.receives[i] = self.comm.Irecv([self.frames[i].buf, MPI.BYTE], source=self.first + w, tag=Tag.PUSH)
            self.gos[w].Wait()          # long done: the worker took its last GO before pushing
            self.gos[w] = self.comm.Isend(empty_spec(), dest=self.first + w, tag=Tag.GO)
            self.last_go = time.perf_counter()

    def close(self) -> None:
        """Cancel the ASK receives (no worker pushes any more), complete the GOs, free every request."""
        for req in self.asks + [r for r in self.receives if r]:
            if not req.Test():          # completes nothing: no worker pushes any more
                req.Cancel()
                req.Wait()
            if isinstance(req, MPI.Prequest):
                req.Free()
        MPI.Request.Waitall(self.gos)


def push_pool(comm: MPI.Comm, first: int, slots: int, n_workers: int, flow: bool) -> PushPool | GrantedPool:
    """The receives for pushes: flow-controlled (``flow``) or ``ANY_SOURCE``."""
    if flow:
        return GrantedPool(comm, first, slots, n_workers, FLOW_FRAMES)
    return PushPool(comm, first, slots, n_workers)
