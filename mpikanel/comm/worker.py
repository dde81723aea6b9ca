"""Worker side of the push/pull exchange with the parameter server (rank 0)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .protocol import Flag, Frame, H, M, Tag

SERVER = 0


@dataclass
class Reply:
    """What the server answered to one push."""

    params: np.ndarray   # view into the reply frame: valid until the next exchange
    version: int
    plan: int
    busy: int
    held_s: float        # seconds the server held the push (sync-policy waiting)
    rtt_s: float         # wall seconds from send to reply


class WorkerClient:
    """Preallocated frames and requests for one worker's exchanges with the server.

    ``start`` posts Isend(delta) + Irecv(reply); ``test`` polls (and drives MPI progress);
    ``wait`` blocks inside MPI (yielding the CPU). ``exchange`` is start + wait.
    """

    def __init__(self, comm: MPI.Comm, n_params: int) -> None:
        self.comm = comm
        self.out = Frame.allocate(n_params)
        self.inp = Frame.allocate(n_params)
        self._reqs: list[MPI.Request] = []
        self._t_sent = 0.0

    @property
    def delta(self) -> np.ndarray:
        """The outgoing payload buffer; fill it before start(). Never touch it while pending."""
        return self.out.payload

    @property
    def pending(self) -> bool:
        """True while an exchange is in flight."""
        return bool(self._reqs)

    def start(self, clock: int, steps: int, step_s: float, last: bool, has_delta: bool = True,
              base_version: int = 0, rtt_s: float = 0.0) -> None:
        """Send the delta in ``self.delta`` and post the receive for the reply."""
        if self._reqs:
            raise RuntimeError("exchange already in flight")
        h = self.out.header
        h[H.CLOCK] = clock
        h[H.STEPS] = steps
        h[H.VERSION] = base_version
        h[H.FLAGS] = (Flag.DONE if last else 0) | (Flag.HAS_DELTA if has_delta else 0)
        self.out.meta[M.STEP_S] = step_s
        self.out.meta[M.RTT_S] = rtt_s
        self._t_sent = time.perf_counter()
        self._reqs = [
            self.comm.Irecv([self.inp.buf, MPI.BYTE], source=SERVER, tag=Tag.REPLY),
            self.comm.Isend([self.out.buf, MPI.BYTE], dest=SERVER, tag=Tag.PUSH),
        ]

    def test(self) -> Reply | None:
        """The reply if the exchange has completed, else None (non-blocking)."""
        if MPI.Request.Testall(self._reqs):
            return self._finish()
        return None

    def wait(self) -> Reply:
        """Block (inside MPI, yielding the CPU) until the reply is here."""
        MPI.Request.Waitall(self._reqs)
        return self._finish()

    def exchange(self, clock: int, steps: int, step_s: float, last: bool) -> Reply:
        """Blocking push of ``self.delta`` and pull of fresh parameters."""
        self.start(clock, steps, step_s, last)
        return self.wait()

    def _finish(self) -> Reply:
        rtt = time.perf_counter() - self._t_sent
        self._reqs = []
        h = self.inp.header
        return Reply(self.inp.payload, int(h[H.VERSION]), int(h[H.PLAN]), int(h[H.BUSY]),
                     float(self.inp.meta[M.HELD_S]), rtt)
