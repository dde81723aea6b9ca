"""Bench-only copies of ``ParameterServer.run`` with other receive loops (rank side only).

Imported only by the ``_server_ranks`` entry point; comm/server.py is untouched. Each
variant replaces the ``Waitsome`` over persistent receives with another way to learn
which workers pushed; everything else (book, policy, replies) is the real server code.
"""
from __future__ import annotations

import time

from mpi4py import MPI

from mpikanel.comm.protocol import Tag
from mpikanel.comm.server import ParameterServer, ServerStats


class _LoopServer(ParameterServer):
    """ParameterServer.run with the wait step factored out into ``_next``."""

    def _next(self) -> list[int] | None:
        """Indices of workers whose push has arrived (None: nothing can arrive)."""
        raise NotImplementedError

    def run(self) -> ServerStats:
        """Serve until every worker has sent its last push (same loop as the real server)."""
        t_start = time.perf_counter()
        self._arm()
        while not self.book.finished:
            done = self._next()
            t0 = time.perf_counter()
            if done is None:
                raise RuntimeError("server variant: nothing can arrive")
            for w in sorted(done):
                self._on_push(w, t0)
            self._release(len(done))
            self.stats.busy_s += time.perf_counter() - t0
        MPI.Request.Waitall(self._send)
        self.stats.wall_s = time.perf_counter() - t_start
        return self.stats

    def _arm(self) -> None:
        MPI.Prequest.Startall(self._recv)


class TestsomeServer(_LoopServer):
    """Poll with Testsome; sleep briefly when nothing arrived."""

    sleep_s = 50e-6

    def _next(self) -> list[int] | None:
        while True:
            done = MPI.Request.Testsome(self._recv)
            if done is None or done:
                return done
            time.sleep(self.sleep_s)


class WaitanyServer(_LoopServer):
    """Block in Waitany: one push per wake-up."""

    def _next(self) -> list[int] | None:
        i = MPI.Request.Waitany(self._recv)
        return None if i == MPI.UNDEFINED else [i]


class _NoRecv:
    """Stands in for a persistent receive: the Mprobe loop receives instead."""

    def Start(self) -> None:  # noqa: N802 - mirrors MPI.Prequest.Start
        """Nothing to arm."""


class MprobeServer(_LoopServer):
    """Blocking Mprobe(ANY_SOURCE) for the first push, then Improbe drains what else is there."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for r in self._recv:
            r.Free()
        self._recv = [_NoRecv() for _ in range(self.n_workers)]
        self._status = MPI.Status()

    def _arm(self) -> None:
        pass

    def _take(self, msg: MPI.Message) -> int:
        w = self._status.Get_source() - 1
        msg.Recv([self._inbox[w].buf, MPI.BYTE])
        return w

    def _next(self) -> list[int] | None:
        msg = self.comm.Mprobe(source=MPI.ANY_SOURCE, tag=Tag.PUSH, status=self._status)
        done = [self._take(msg)]
        while (msg := self.comm.Improbe(source=MPI.ANY_SOURCE, tag=Tag.PUSH, status=self._status)) is not None:
            done.append(self._take(msg))
        return done


VARIANTS = {"testsome": TestsomeServer, "waitany": WaitanyServer, "mprobe": MprobeServer}
