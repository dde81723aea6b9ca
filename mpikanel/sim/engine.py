"""A discrete-event transport: the real server core and worker cores on a virtual clock.

One process holds every worker. Each worker core is a generator (mpikanel.engine.worker_core)
that runs the real numba step on its real data shard and yields where time must pass: the
simulator answers ``Compute`` with the modeled step time (times the injected heterogeneity) and
``WAIT`` (``PROBE_WAIT``) by suspending the worker until its reply's (probe answer's) arrival. Pushes travel a modeled link
to the server, which serves them one at a time as a FIFO queue and hands them to the same
ServerCore the MPI server runs; its answers travel back. Events at equal times run in the order
they were scheduled, so a run is deterministic for a seed. A probe (ESP) waits for the push being
served, then is answered at once with the core's probe answer.
"""
from __future__ import annotations

import collections
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..engine.messages import PAYLOAD_OFFSET
from ..engine.messages import Answer
from ..engine.outcome import Send
from ..engine.server_core import ProbeReply, Push, ServerCore
from ..engine.worker_core import PROBE_WAIT, WAIT, ProbeAnswer, Reply
from ..hetero import Injector, ServerDelay
from ..engine.sparse import payload_nbytes, use_sparse
from .models import NetworkModel, ServerModel

FRAME_OVERHEAD = PAYLOAD_OFFSET      # header + meta bytes of a frame (engine.messages: no mpi4py there)


@dataclass
class SimStats:
    """What the event loop did (for the summary and the per-event cost)."""

    events: int = 0
    pushes: int = 0
    replies: int = 0
    server_busy_s: float = 0.0       # virtual seconds the server spent serving
    queue_wait_s: float = 0.0        # virtual seconds pushes waited for the server
    event_s: list = field(default_factory=list)   # (events, real seconds) samples


class SimClient:
    """A worker's exchanger on the virtual clock (WorkerClient's non-blocking interface)."""

    def __init__(self, sim: "Simulator", w: int, n_params: int, push_mode: str = "dense") -> None:
        self.sim, self.w = sim, w
        self.delta = np.zeros(n_params)
        self.push_mode = push_mode
        self._keys: np.ndarray | None = None    # the push's keys when it goes sparse, and their values
        self._values: np.ndarray | None = None
        self.ready: Reply | None = None
        self.pending = False
        self.waiting_since: float | None = None
        self.probe_ready: ProbeAnswer | None = None
        self.probing = False
        self.probe_waiting = False
        self._probe_sent = 0.0
        self._t_sent = 0.0
        self._landed = 0.0
        self._last = False
        self.stop_requested = lambda: False

    def pack(self) -> int:
        """Choose the push's frame as WorkerClient does (one decision for all servers); its payload bytes."""
        self._keys = None
        if self.push_mode != "dense":
            keys = np.flatnonzero(self.delta)
            if use_sparse(self.push_mode, keys.size, self.delta.size):
                self._keys, self._values = keys, self.delta[keys]
        nnz = 0 if self._keys is None else self._keys.size
        return payload_nbytes(self._keys is not None, nnz, self.delta.size)

    def pack_keys(self, keys: np.ndarray, values: np.ndarray) -> int:
        """Frame a delta given as sorted keys and values (zero elsewhere); its payload bytes."""
        self._keys, self._values = keys, values
        if not use_sparse(self.push_mode, keys.size, self.delta.size):
            self._keys = None
            self.delta[:] = 0.0
            self.delta[keys] = values
        return payload_nbytes(self._keys is not None, keys.size, self.delta.size)

    def start(self, clock: int, steps: int, step_s: float, last: bool, base_version: int = 0,
              rtt_s: float = 0.0, delay_s: float = 0.0, samples: int = 0, background: bool = False) -> None:
        """Send the push: it reaches the server after the link's time (and any injected delay)."""
        if self.pending:
            raise RuntimeError("exchange already in flight")
        self.pending, self._last, self._t_sent = True, last, self.sim.now
        keys = self._keys
        delta = self.delta if keys is None else self._values
        push = Push(self.w, clock, steps, samples, base_version, step_s, last=last,
                    delta=delta, keys=keys)
        nbytes = FRAME_OVERHEAD + payload_nbytes(keys is not None, 0 if keys is None else keys.size, self.delta.size)
        self.sim.at(self.sim.now + delay_s + self.sim.network.transfer_s(nbytes), self.sim.push_arrives, push, nbytes)

    def test(self) -> Reply | None:
        """The reply if it has arrived by now."""
        reply, self.ready = self.ready, None
        if reply is not None:
            self.pending = False
            reply.landed_ago_s = self.sim.now - self._landed
        return reply

    def probe_start(self, delay_s: float = 0.0) -> None:
        """Send a header-only probe: the server answers it when it is next free."""
        if self.probing:
            raise RuntimeError("probe already in flight")
        self.probing, self._probe_sent = True, self.sim.now
        self.sim.at(self.sim.now + delay_s + self.sim.network.transfer_s(PAYLOAD_OFFSET), self.sim.probe_arrives, self.w)

    def probe_test(self) -> ProbeAnswer | None:
        """The probe's answer if it has arrived by now."""
        answer, self.probe_ready = self.probe_ready, None
        if answer is not None:
            self.probing = False
        return answer

    def probe_arrive(self, p: ProbeReply) -> ProbeAnswer:
        """Build the ProbeAnswer of a probe answer arriving now."""
        return ProbeAnswer(self.sim.now - self._probe_sent, p.version, p.queued, p.service_s, p.recv_bps,
                           p.update_norm)

    def send_state(self, state: dict, seq: int) -> None:
        """Checkpoints are off in the simulator."""

    def arrive(self, a: Answer, params: np.ndarray, nbytes: int) -> Reply:
        """Build the Reply of an answer arriving now (params: the values at a.keys, if sparse)."""
        self._landed = self.sim.now
        return Reply.of(a, params, a.keys, nbytes, self._last, self.sim.now - self._t_sent)


class Simulator:
    """The event loop: workers, links and the server on one virtual clock."""

    def __init__(self, core: ServerCore, workers: list, injectors: list[Injector], step_s: np.ndarray,
                 batch_size: int, network: NetworkModel, server: ServerModel,
                 service: ServerDelay | None = None, clock: Callable[[], float] | None = None,
                 servers: int = 1) -> None:
        self.core = core
        # K server ranks (--servers): each takes in, applies and replies 1/K of the bytes, in step
        # with server 0, and answers one control hop after server 0 decided; so the server's
        # queue is modelled once with 1/K of the bytes, and every reply lands one hop later
        self.servers = servers
        self.gens = workers                   # worker-core generators, filled by the caller
        self.clients: list[SimClient] = []
        self.injectors = injectors
        self.step_s = np.asarray(step_s, dtype=np.float64)
        self.batch_size = batch_size
        self.network, self.server = network, server
        self.service = service
        self.now = 0.0
        self.stats = SimStats()
        self.results: dict[int, Any] = {}
        self._queue: list = []
        self._seq = itertools.count()
        self._server_free = 0.0
        self._snapshot: tuple[int, np.ndarray] | None = None
        self._stopped = False                 # the core's last outcome ended the run
        self._clock = clock
        self._queued = 0                      # pushes arrived at the server and not yet served
        self._ends: collections.deque = collections.deque()   # their service end times, FIFO

    def at(self, t: float, fn: Callable, *args: Any) -> None:
        """Schedule fn(*args) at virtual time t."""
        heapq.heappush(self._queue, (t, next(self._seq), fn, args))

    def run(self) -> float:
        """Run until every worker has finished; returns the virtual end time."""
        self._stopped = self.core.start(0.0).stop
        for w in range(len(self.gens)):
            self.at(0.0, self._advance, w, None)
        clock = self._clock
        t_real = clock() if clock else 0.0
        while self._queue:
            self.now, _, fn, args = heapq.heappop(self._queue)
            fn(*args)
            self.stats.events += 1
            if clock and self.stats.events % 4096 == 0:
                self.stats.event_s.append((self.stats.events, clock() - t_real))
        if len(self.results) != len(self.gens) or not self._stopped:
            stuck = sorted(set(range(len(self.gens))) - set(self.results))
            raise RuntimeError(f"simulation stalled at t={self.now:.3f}s: workers {stuck[:10]} never finished "
                               f"(policy {self.core.describe()})")
        return self.now

    # --- workers -------------------------------------------------------------------------

    def _advance(self, w: int, answer: Any) -> None:
        """Run worker w's core until it needs time to pass."""
        gen = self.gens[w]
        while True:
            try:
                effect = gen.send(answer)
            except StopIteration as done:
                self.results[w] = done.value
                return
            if effect is WAIT:
                client = self.clients[w]
                if client.ready is not None:
                    answer = client.test()
                    continue
                client.waiting_since = self.now
                return
            if effect is PROBE_WAIT:
                client = self.clients[w]
                if client.probe_ready is not None:
                    answer = client.probe_test()
                    continue
                client.probe_waiting = True
                return
            base = self.step_s[w] * effect.rows / self.batch_size
            slow = self.injectors[w].compute_delay(base)
            self.at(self.now + base + slow, self._advance, w, (base, slow))
            return

    def _reply_arrives(self, w: int, a: Answer, params: np.ndarray, nbytes: int) -> None:
        client = self.clients[w]
        reply = client.arrive(a, params, nbytes)
        self.stats.replies += 1
        if client.waiting_since is not None:
            reply.blocked_s = self.now - client.waiting_since
            client.waiting_since = None
            client.pending = False
            self._advance(w, reply)
        else:
            client.ready = reply

    def _probe_answer_arrives(self, w: int, p: ProbeReply) -> None:
        client = self.clients[w]
        answer = client.probe_arrive(p)
        if client.probe_waiting:
            client.probe_waiting = client.probing = False
            self._advance(w, answer)
        else:
            client.probe_ready = answer

    # --- the server ----------------------------------------------------------------------

    def probe_arrives(self, w: int) -> None:
        """A probe reached the server: answered as soon as the push being served is done (the MPI
        server answers probes between pushes), before the pushes queued behind it."""
        t = max(self.now, self._ends[0] if self._ends else self.now) + self.server.probe_s
        self.at(t, self._answer_probe, w)

    def _answer_probe(self, w: int) -> None:
        p = self.core.on_probe(w, self._queued)
        self.at(self.now + self.network.transfer_s(PAYLOAD_OFFSET), self._probe_answer_arrives, w, p)

    def push_arrives(self, push: Push, nbytes: int) -> None:
        """A push of `nbytes` reached the server: queue it behind what the server is doing."""
        service = self.server.push_service_s(self._share(nbytes))
        if self.service is not None:
            service += self.service.draw(self.stats.pushes)
            push.service_s = service
        start = max(self.now, self._server_free)
        self.stats.queue_wait_s += start - self.now
        self.stats.pushes += 1
        self._queued += 1
        self._server_free = start + service
        self.stats.server_busy_s += service
        self._ends.append(self._server_free)
        self.at(self._server_free, self._serve, push, service, nbytes)

    def _serve(self, push: Push, service: float, nbytes: int) -> None:
        core = self.core
        self._queued -= 1
        self._ends.popleft()
        core.on_push(push, self.now)        # no frames to free, no ops to forward, service modelled
        core.on_served(service, self._share(nbytes), self.now)
        out = core.on_tick(self.now)
        self._stopped = out.stop
        if not out.replies:
            return
        params = self._params(out.replies[0])
        hop = self.network.transfer_s(FRAME_OVERHEAD) if self.servers > 1 else 0.0    # the CONTROL op
        t = max(self.now, self._server_free)
        for send in out.replies:
            a = send.answer
            # what reaches the worker over its link: the whole vector, or the keys changed since its last
            values = params if a.keys is None else params[a.keys]
            out = FRAME_OVERHEAD + payload_nbytes(a.keys is not None, values.size, params.size)
            t += self.server.reply_s(self._share(out))
            self.at(t + hop + self.network.transfer_s(out), self._reply_arrives, a.w, a, values, out)
        self.stats.server_busy_s += t - max(self.now, self._server_free)
        self._server_free = t

    def _share(self, nbytes: int) -> int:
        """Bytes of a push or reply message of `nbytes` that one server handles: its share of the payload."""
        return FRAME_OVERHEAD + -(-(nbytes - FRAME_OVERHEAD) // self.servers)

    def _params(self, send: Send) -> np.ndarray:
        """One read-only snapshot of the parameters per version, shared by every reply at it."""
        version = send.answer.version
        if self._snapshot is None or self._snapshot[0] != version:
            snap = send.params.copy()
            snap.flags.writeable = False
            self._snapshot = (version, snap)
        return self._snapshot[1]
