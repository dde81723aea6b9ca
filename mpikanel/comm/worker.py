"""Worker side of the push/pull exchange with the parameter server (rank 0)."""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..engine.worker_core import Reply
from .protocol import Flag, Frame, H, M, Tag

SERVER = 0


class WorkerClient:
    """Preallocated frames and requests for one worker's exchanges with the server.

    ``start`` posts Isend(delta) + Irecv(reply); ``test`` polls (and drives MPI progress);
    ``wait`` blocks inside MPI (yielding the CPU). ``exchange`` is start + wait. An injected
    link delay defers the Isend without blocking: the message leaves at the first test() or
    wait() after the delay has passed, like a slow link would deliver it.
    """

    def __init__(self, comm: MPI.Comm, n_params: int) -> None:
        self.comm = comm
        self.out = Frame.allocate(n_params)
        self.inp = Frame.allocate(n_params)
        self._reqs: list[MPI.Request] = []
        self._t_sent = 0.0
        self._send_at: float | None = None   # deferred Isend (injected link delay)
        self._last = False
        self.stop_requested = lambda: False  # set by the entry point: a signal asked to stop

    @property
    def delta(self) -> np.ndarray:
        """The outgoing payload buffer; fill it before start(). Never touch it while pending."""
        return self.out.payload

    @property
    def pending(self) -> bool:
        """True while an exchange is in flight."""
        return bool(self._reqs)

    def start(self, clock: int, steps: int, step_s: float, last: bool, has_delta: bool = True,
              base_version: int = 0, rtt_s: float = 0.0, delay_s: float = 0.0, samples: int = 0) -> None:
        """Send the delta in ``self.delta`` (after ``delay_s``) and post the receive for the reply."""
        if self._reqs:
            raise RuntimeError("exchange already in flight")
        h = self.out.header
        h[H.CLOCK] = clock
        h[H.STEPS] = steps
        h[H.SAMPLES] = samples
        h[H.VERSION] = base_version
        h[H.FLAGS] = ((Flag.DONE if last else 0) | (Flag.HAS_DELTA if has_delta else 0)
                      | (Flag.STOP_REQUEST if self.stop_requested() else 0))
        self._last = last
        self.out.meta[M.STEP_S] = step_s
        self.out.meta[M.RTT_S] = rtt_s
        self._t_sent = time.perf_counter()
        self._reqs = [self.comm.Irecv([self.inp.buf, MPI.BYTE], source=SERVER, tag=Tag.REPLY)]
        self._send_at = self._t_sent + delay_s if delay_s > 0 else None
        if self._send_at is None:
            self._send()

    def _send(self) -> None:
        self._send_at = None
        self._reqs.append(self.comm.Isend([self.out.buf, MPI.BYTE], dest=SERVER, tag=Tag.PUSH))

    def test(self) -> Reply | None:
        """The reply if the exchange has completed, else None (non-blocking)."""
        if self._send_at is not None:
            if time.perf_counter() < self._send_at:
                return None
            self._send()
        if MPI.Request.Testall(self._reqs):
            return self._finish(0.0, 0.0)
        return None

    def wait(self) -> Reply:
        """Block (inside MPI, yielding the CPU) until the reply is here."""
        t0 = time.perf_counter()
        delayed = 0.0
        if self._send_at is not None:
            delayed = max(0.0, self._send_at - t0)
            time.sleep(delayed)
            self._send()
        MPI.Request.Waitall(self._reqs)
        return self._finish(time.perf_counter() - t0, delayed)

    def exchange(self, clock: int, steps: int, step_s: float, last: bool) -> Reply:
        """Blocking push of ``self.delta`` and pull of fresh parameters."""
        self.start(clock, steps, step_s, last)
        return self.wait()

    def _finish(self, blocked_s: float, delayed_s: float) -> Reply:
        rtt = time.perf_counter() - self._t_sent
        self._reqs = []
        h = self.inp.header
        return Reply(self.inp.payload, int(h[H.VERSION]), int(h[H.PLAN]), int(h[H.BUSY]),
                     float(self.inp.meta[M.HELD_S]), rtt, blocked_s, delayed_s,
                     lease=int(h[H.LEASE]), finish=self.inp.has(Flag.FINISH), last=self._last,
                     checkpoint=self.inp.has(Flag.CHECKPOINT), stop=self.inp.has(Flag.STOP))

    def send_state(self, state: dict) -> None:
        """Send this worker's resumable state to the server (pickled: checkpoints and run end only)."""
        self.comm.send(state, dest=SERVER, tag=Tag.STATE)
