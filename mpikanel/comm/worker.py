"""Worker side of the push/pull exchange with the parameter servers (ranks 0..K-1)."""
from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..engine.worker_core import ProbeAnswer, Reply
from ..engine.servermap import ServerMap
from ..engine.sparse import capacity, pack, payload_nbytes, use_sparse
from ..engine.messages import PAYLOAD_OFFSET, Flag, Frame, H, M, Tag, read_answer
from .pushpool import empty_spec
from .waits import wait_all, wait_some

SERVER = 0      # decides for all servers: replies' headers, probes and resumable states go to it


class SlicedFrame:
    """A frame per server sharing one full payload vector: a push to server k is header block k
    followed by server k's key range of the payload (an hindexed datatype, committed once); a
    reply from it lands as two messages, the header block (REPLY) and the range (REPLY_DATA),
    each straight where it belongs."""

    def __init__(self, n_params: int, smap: ServerMap) -> None:
        self.frames = [Frame.allocate(0) for _ in range(smap.servers)]
        self.payload = np.zeros(n_params)
        self.ranges = [smap.range(k) for k in range(smap.servers)]
        self.types = []
        for f, r in zip(self.frames, self.ranges):
            part = self.payload[r]
            self.types.append(MPI.BYTE.Create_hindexed([f.buf.nbytes, part.nbytes],
                                                       [MPI.Get_address(f.buf), MPI.Get_address(part)]).Commit())
        self.header, self.meta = self.frames[0].header, self.frames[0].meta

    def specs(self) -> list:
        """One MPI buffer spec per server, in rank order."""
        return [[MPI.BOTTOM, 1, t] for t in self.types]

    def receives(self, tag: Tag) -> list[tuple[list, int, Tag]]:
        """(buffer spec, source, tag) of every message a reply arrives in: per server, its header
        block and its range of the payload."""
        out = []
        for k, (f, r) in enumerate(zip(self.frames, self.ranges)):
            out += [([f.buf, MPI.BYTE], k, tag), ([self.payload[r], MPI.DOUBLE], k, Tag.REPLY_DATA)]
        return out

    def pack(self) -> int:
        """Nothing to pack (the frames read the payload in place); the payload bytes sent."""
        return self.payload.nbytes

    def unpack(self) -> tuple[np.ndarray | None, np.ndarray, int]:
        """A reply: (None, the whole parameter vector, bytes received)."""
        return None, self.payload, self.payload.nbytes + len(self.frames) * PAYLOAD_OFFSET

    def has(self, flag: Flag) -> bool:
        """True when server 0's header has this flag."""
        return self.frames[0].has(flag)

    def copy_header(self) -> None:
        """Give every server the header filled in for server 0."""
        for f in self.frames[1:]:
            f.buf[:] = self.frames[0].buf

    def free(self) -> None:
        """Free the datatypes."""
        for t in self.types:
            t.Free()
        self.types = []


class PackedFrames:
    """A frame per server holding its range of a push or reply, dense or SPARSE (mpikanel.engine.sparse),
    copied to and from one full vector (``payload``) by :meth:`pack` and :meth:`unpack`."""

    def __init__(self, n_params: int, smap: ServerMap, mode: str) -> None:
        self.mode = mode
        self.ranges = [smap.range(k) for k in range(smap.servers)]
        self.payload = np.zeros(n_params)
        self.frames = [Frame.allocate(capacity(mode, r.stop - r.start)) for r in self.ranges]
        self.counts = [f.buf.nbytes for f in self.frames]       # bytes to send of each frame
        self.nnz = [-1] * len(self.frames)                      # keys per frame (-1: dense)
        self.header, self.meta = self.frames[0].header, self.frames[0].meta

    def specs(self) -> list:
        """One MPI buffer spec per server: the packed bytes of each frame."""
        return [[f.buf, c, MPI.BYTE] for f, c in zip(self.frames, self.counts)]

    def receives(self, tag: Tag) -> list[tuple[list, int, Tag]]:
        """(buffer spec, source, tag) of every message a reply arrives in: one frame per server."""
        return [([f.buf, MPI.BYTE], k, tag) for k, f in enumerate(self.frames)]

    def has(self, flag: Flag) -> bool:
        """True when server 0's header has this flag."""
        return self.frames[0].has(flag)

    def pack(self) -> int:
        """Copy each server's range of the payload into its frame, sparse where that is smaller (or
        forced); returns the payload bytes to send."""
        total = 0
        for k, (f, r) in enumerate(zip(self.frames, self.ranges)):
            part = self.payload[r]
            keys = np.flatnonzero(part)
            sparse = use_sparse(self.mode, keys.size, part.size)
            if sparse:
                pack(f.payload, keys, part[keys])
            else:
                f.payload[:part.size] = part
            total += self._framed(k, sparse, keys.size, part.size)
        return total

    def pack_keys(self, keys: np.ndarray, values: np.ndarray) -> int:
        """Frame a delta given as sorted global keys and values (zero elsewhere) without reading the
        payload; returns the payload bytes to send."""
        total = 0
        cuts = np.searchsorted(keys, [r.start for r in self.ranges] + [self.ranges[-1].stop])
        for k, (f, r) in enumerate(zip(self.frames, self.ranges)):
            sub, vals = keys[cuts[k]:cuts[k + 1]] - r.start, values[cuts[k]:cuts[k + 1]]
            n = r.stop - r.start
            sparse = use_sparse(self.mode, sub.size, n)
            if sparse:
                pack(f.payload, sub, vals)
            else:
                f.payload[:n] = 0.0
                f.payload[sub] = vals
            total += self._framed(k, sparse, sub.size, n)
        return total

    def _framed(self, k: int, sparse: bool, nnz: int, n: int) -> int:
        """Frame k holds nnz keys (sparse) or its whole range of n: note its size; its payload bytes."""
        self.nnz[k] = nnz if sparse else -1
        nbytes = payload_nbytes(sparse, nnz, n)
        self.counts[k] = PAYLOAD_OFFSET + nbytes
        return nbytes

    def copy_header(self) -> None:
        """Give every server the header filled in for server 0, each with its own SPARSE and NNZ."""
        src = self.frames[0].buf[:PAYLOAD_OFFSET]
        for k, f in enumerate(self.frames):
            if k:
                f.buf[:PAYLOAD_OFFSET] = src
            sparse = self.nnz[k] >= 0
            f.header[H.FLAGS] = (int(f.header[H.FLAGS]) & ~Flag.SPARSE) | (Flag.SPARSE if sparse else 0)
            f.header[H.NNZ] = max(0, self.nnz[k])

    def unpack(self) -> tuple[np.ndarray | None, np.ndarray, int]:
        """A reply: (None, the whole vector) when every server sent its whole range, else (the
        global keys, their values); and the bytes received."""
        parts = [(f.entries(r.stop - r.start), r) for f, r in zip(self.frames, self.ranges)]
        nbytes = sum(f.nbytes(r.stop - r.start) for f, r in zip(self.frames, self.ranges))
        if all(keys is None for (keys, _), _ in parts):
            for (_, values), r in parts:
                self.payload[r] = values
            return None, self.payload, nbytes
        keys = np.concatenate([np.arange(r.start, r.stop) if k is None else k + r.start for (k, _), r in parts])
        values = np.concatenate([v for (_, v), _ in parts])
        return keys, values, nbytes

    def free(self) -> None:
        """Nothing to free (no datatypes)."""


class _Flight:
    """One request/answer exchange with the servers: its requests, a deferred send, when it landed."""

    def __init__(self, comm: MPI.Comm, out, inp, send_tag: Tag, recv_tag: Tag, flow: bool = False) -> None:
        self.comm, self.send_tag, self.recv_tag = comm, send_tag, recv_tag
        self.out, self.inp = out, inp
        self.framed = not isinstance(out, Frame)    # a push (frames per server), not a header-only probe
        self.flow = flow and self.framed            # each server's part waits for its GO (mpikanel.engine.flow)
        self._gos: list[MPI.Request] = []
        self._parts: list = []                      # buffer specs of the parts still waiting for a GO
        self._unsent = 0
        self._in = inp.receives(recv_tag) if self.framed else [([inp.buf, MPI.BYTE], SERVER, recv_tag)]
        self.reqs: list[MPI.Request] = []
        self.t_sent = 0.0
        self.send_at: float | None = None   # deferred Isend (injected link delay)
        self.landed: float | None = None    # perf_counter() when its answer was seen complete
        self.driven = False                 # the progress thread drives it
        self.delayed_s = 0.0

    def post(self, delay_s: float) -> None:
        """Irecv the answer, Isend the request now or after ``delay_s`` (caller holds MPI)."""
        self.landed, self.driven = None, False
        self.t_sent = time.perf_counter()
        self.reqs = [self.comm.Irecv(spec, source=k, tag=tag) for spec, k, tag in self._in]
        self.send_at = self.t_sent + delay_s if delay_s > 0 else None
        if self.send_at is None:
            self._send()

    def _send(self) -> None:
        self.send_at = None
        specs = self.out.specs() if self.framed else [[self.out.buf, MPI.BYTE]]    # probes: to server 0
        if self.flow:
            self._parts, self._unsent = specs, len(specs)
            self._gos = [self.comm.Irecv(empty_spec(), source=k, tag=Tag.GO) for k in range(len(specs))]
            self.reqs.extend(self.comm.Isend(empty_spec(), dest=k, tag=Tag.ASK) for k in range(len(specs)))
            return
        self.reqs.extend(self.comm.Isend(spec, dest=k, tag=self.send_tag) for k, spec in enumerate(specs))

    def _go(self, block: bool) -> bool:
        """Send each server's part whose GO is here (waiting for one if ``block``); True once all are sent."""
        done = wait_some(self._gos) if block else MPI.Request.Testsome(self._gos)
        for k in done or ():
            self.reqs.append(self.comm.Isend(self._parts[k], dest=k, tag=self.send_tag))
            self._unsent -= 1
        return self._unsent == 0

    def poll(self) -> bool:
        """Send a due deferred request, then test; True once landed (caller holds MPI)."""
        if self.landed is None:
            if self.send_at is not None:
                if time.perf_counter() < self.send_at:
                    return False
                self._send()
            if self._unsent and not self._go(block=False):
                return False
            # one Testall may take in only one arrived message (Intel MPI): a dense reply is two
            # per server, so test as often as there are requests before calling it not landed
            if any(MPI.Request.Testall(self.reqs) for _ in self.reqs):
                self.landed = time.perf_counter()
        return self.landed is not None

    def block(self) -> float:
        """Wait until landed (sleeping out a deferred send first, then between tests); returns seconds blocked."""
        t0 = time.perf_counter()
        self.delayed_s = 0.0
        if self.landed is None:
            if self.send_at is not None:
                self.delayed_s = max(0.0, self.send_at - t0)
                time.sleep(self.delayed_s)
                self._send()
            while self._unsent:
                self._go(block=True)
            wait_all(self.reqs)
            self.landed = time.perf_counter()
            return self.landed - t0
        return 0.0

    def close(self) -> None:
        """The answer was taken: nothing in flight."""
        self.reqs, self.driven, self._gos, self._parts = [], False, [], []


def _no_checkpoint_dir(state: dict, seq: int) -> dict:
    raise RuntimeError("the server asked for a checkpoint part, but this worker has no checkpoint directory")


class WorkerClient:
    """Preallocated frames and requests for one worker's exchanges with the server.

    ``start`` posts Isend(delta) + Irecv(reply); ``test`` returns the reply once it is here;
    ``wait`` blocks inside MPI (yielding the CPU). ``exchange`` is start + wait. An injected
    link delay defers the Isend without blocking, like a slow link would deliver it. Under flow
    control (``flow``) the Isend is a header-less ASK to each server, and each server's part moves
    when its GO lands (driven like the rest).
    ``probe_start``/``probe_test``/``probe_wait`` do the same with a header-only PROBE, which
    the server answers at once with its queue, service time, version and update norm (ESP).

    With ``progress`` (the default where MPI provides at least THREAD_SERIALIZED) a progress
    thread drives what the worker left in flight while it computes (the numba kernels release
    the GIL): it sends a deferred message when its delay is over and tests the requests with a
    backoff of about a tenth of the time waited so far (100 us to 2 ms, sleeping in between: no
    spinning), so a round trip is timed when the answer lands, not at the next step boundary.
    Only one thread is ever inside MPI: every MPI call is made under one lock, and a flight the
    worker blocks on is taken back from the thread (the worker then waits inside MPI itself).
    """

    POLL_MIN_S = 1e-4
    POLL_MAX_S = 2e-3

    def __init__(self, comm: MPI.Comm, n_params: int, progress: bool | None = None,
                 servers: ServerMap | None = None, push_mode: str = "dense",
                 stop_requested: Callable[[], bool] | None = None,
                 write_part: Callable[[dict, int], dict] | None = None, flow: bool = False) -> None:
        """``flow``: each push asks its servers first and moves on their GO (mpikanel.engine.flow;
        the servers must agree)."""
        self.comm = comm
        smap = servers if servers is not None else ServerMap(n_params, 1)
        if push_mode == "dense":
            out, inp = SlicedFrame(n_params, smap), SlicedFrame(n_params, smap)
        else:
            out, inp = PackedFrames(n_params, smap, push_mode), PackedFrames(n_params, smap, push_mode)
        self._ex = _Flight(comm, out, inp, Tag.PUSH, Tag.REPLY, flow)
        self.push_mode = push_mode
        self._pr = _Flight(comm, Frame.allocate(0), Frame.allocate(0), Tag.PROBE, Tag.PROBE_REPLY)
        self.out, self.inp = self._ex.out, self._ex.inp
        self._last = False
        # a signal asked to stop (flagged on the next push); write this worker's part of checkpoint
        # seq and return its manifest entry (no checkpoint directory: asking for one is an error)
        self.stop_requested: Callable[[], bool] = stop_requested or (lambda: False)
        self.write_part: Callable[[dict, int], dict] = write_part or _no_checkpoint_dir
        if progress is None:
            progress = MPI.Query_thread() >= MPI.THREAD_SERIALIZED
        self.progress = progress
        self._lock = threading.Lock()        # held by whichever thread is inside MPI
        self._armed = threading.Event()      # something for the progress thread to drive
        self._closing = False
        self._thread: threading.Thread | None = None
        if progress:
            self._thread = threading.Thread(target=self._drive, name="mpikanel-progress", daemon=True)
            self._thread.start()

    @property
    def delta(self) -> np.ndarray:
        """The outgoing payload buffer; fill it before start(). Never touch it while pending."""
        return self.out.payload

    def pack(self) -> int:
        """Frame the delta for sending (sparse where smaller); the payload bytes it will send."""
        return self.out.pack()

    def pack_keys(self, keys: np.ndarray, values: np.ndarray) -> int:
        """Frame a delta given as sorted keys and values (sparse frames only); the payload bytes."""
        return self.out.pack_keys(keys, values)

    @property
    def pending(self) -> bool:
        """True while an exchange is in flight."""
        return bool(self._ex.reqs)

    # --- the progress thread ------------------------------------------------------------------

    def _launch(self, flight: _Flight, delay_s: float, background: bool) -> None:
        with self._lock:
            flight.post(delay_s)
            flight.driven = background and self._thread is not None
        if flight.driven:
            self._armed.set()

    def _drive(self) -> None:
        """Progress thread: drive the flights left to it until they land or are taken back."""
        while True:
            self._armed.wait()
            self._armed.clear()
            if self._closing:
                return
            while True:
                with self._lock:
                    flights = [f for f in (self._ex, self._pr) if f.driven and not f.poll()]
                    oldest = min((f.t_sent for f in flights), default=0.0)
                    due = [f.send_at for f in flights if f.send_at is not None]
                if not flights or self._closing:
                    break
                now = time.perf_counter()
                pause = min(self.POLL_MAX_S, max(self.POLL_MIN_S, 0.1 * (now - oldest)))
                if due:
                    pause = min(pause, max(0.0, min(due) - now))
                time.sleep(pause)

    def _take(self, flight: _Flight, block: bool) -> tuple[float, float] | None:
        """(landed, blocked_s) of a flight, blocking for it if asked; None if not landed yet."""
        with self._lock:
            if not block:
                return (flight.landed, 0.0) if flight.poll() else None
            # blocking under the lock keeps the thread out of MPI; it has nothing else to drive
            # meanwhile (the worker never leaves a probe in flight over a push, or the reverse)
            flight.driven = False
            blocked = flight.block()
        return flight.landed, blocked

    def close(self) -> None:
        """Stop the progress thread (it leaves MPI alone from here on, even mid-exchange)."""
        if self._thread is not None:
            with self._lock:
                self._closing = True
                self._ex.driven = self._pr.driven = False
            self._armed.set()
            self._thread.join(timeout=5.0)
            self._thread = None
        if not self._ex.reqs:           # datatypes of a flight still pending stay (the run is ending anyway)
            self.out.free()
            self.inp.free()

    # --- pushes ---------------------------------------------------------------------------------

    def start(self, clock: int, steps: int, step_s: float, last: bool, has_delta: bool = True,
              base_version: int = 0, rtt_s: float = 0.0, delay_s: float = 0.0, samples: int = 0,
              background: bool = False) -> None:
        """Send the delta in ``self.delta`` (after ``delay_s``) and post the receive for the reply;
        ``background``: the worker computes on meanwhile, so the progress thread drives it."""
        if self._ex.reqs:
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
        self.out.copy_header()
        self._launch(self._ex, delay_s, background)

    def test(self) -> Reply | None:
        """The reply if the exchange has completed, else None (non-blocking)."""
        if not self._ex.reqs:
            return None
        got = self._take(self._ex, block=False)
        return None if got is None else self._reply(*got)

    def wait(self) -> Reply:
        """Block (inside MPI, yielding the CPU) until the reply is here."""
        landed, blocked = self._take(self._ex, block=True)
        return self._reply(landed, blocked)

    def exchange(self, clock: int, steps: int, step_s: float, last: bool) -> Reply:
        """Blocking push of ``self.delta`` and pull of fresh parameters."""
        self.start(clock, steps, step_s, last)
        return self.wait()

    def _reply(self, landed: float, blocked_s: float) -> Reply:
        f = self._ex
        delayed = f.delayed_s if blocked_s > 0 else 0.0
        f.delayed_s = 0.0
        f.close()
        keys, params, nbytes = self.inp.unpack()
        return Reply.of(read_answer(self.inp.header, self.inp.meta), params, keys, nbytes, self._last,
                        landed - f.t_sent, blocked_s, delayed, time.perf_counter() - landed)

    # --- probes ---------------------------------------------------------------------------------

    @property
    def probing(self) -> bool:
        """True while a probe is in flight."""
        return bool(self._pr.reqs)

    def probe_start(self, delay_s: float = 0.0) -> None:
        """Send a PROBE (after ``delay_s``, the link's delay) and keep computing."""
        if self._pr.reqs:
            raise RuntimeError("probe already in flight")
        self._launch(self._pr, delay_s, background=True)

    def probe_test(self) -> ProbeAnswer | None:
        """The probe's answer if it has landed, else None (non-blocking)."""
        if not self._pr.reqs:
            return None
        got = self._take(self._pr, block=False)
        return None if got is None else self._probe_answer(got[0])

    def probe_wait(self) -> ProbeAnswer:
        """Block until the probe's answer is here (before a push: one flight at a time)."""
        landed, _ = self._take(self._pr, block=True)
        return self._probe_answer(landed)

    def _probe_answer(self, landed: float) -> ProbeAnswer:
        f = self._pr
        f.close()
        h, meta = f.inp.header, f.inp.meta
        return ProbeAnswer(rtt_s=landed - f.t_sent, version=int(h[H.VERSION]), queued=int(h[H.BUSY]),
                           service_s=float(meta[M.SERVICE_S]), recv_bps=float(meta[M.RECV_BPS]),
                           update_norm=float(meta[M.UPDATE_NORM]))

    def send_state(self, state: dict, seq: int) -> None:
        """Write this worker's resumable state as its part of checkpoint `seq` (``write_part``, set
        by the entry point) and send the server that part's manifest entry (small, pickled)."""
        part = self.write_part(state, seq)
        with self._lock:
            self.comm.send(part, dest=SERVER, tag=Tag.STATE)
