"""Bench-only receive loops for the parameter server (rank side only).

Imported only by the ``_server_ranks`` entry point. Each variant replaces only how the MPI
server learns which workers pushed (``_arm``/``_next`` of comm.server.ParameterServer);
the core, the decoding and the replies are the real server's.
"""
from __future__ import annotations

import time

from mpi4py import MPI

from mpikanel.comm.protocol import Tag
from mpikanel.comm.server import ParameterServer


class TestsomeServer(ParameterServer):
    """Poll with Testsome; sleep briefly when nothing arrived."""

    sleep_s = 50e-6

    def _next(self) -> list[int] | None:
        while True:
            done = MPI.Request.Testsome(self._recv)
            if done is None or done:
                return done
            time.sleep(self.sleep_s)


class WaitanyServer(ParameterServer):
    """Block in Waitany: one push per wake-up."""

    def _next(self) -> list[int] | None:
        i = MPI.Request.Waitany(self._recv)
        return None if i == MPI.UNDEFINED else [i]


class _NoRecv:
    """Stands in for a persistent receive: the Mprobe loop receives instead."""

    def Start(self) -> None:  # noqa: N802 - mirrors MPI.Prequest.Start
        """Nothing to arm."""

    def Free(self) -> None:  # noqa: N802 - mirrors MPI.Request.Free
        """Nothing to free."""


class MprobeServer(ParameterServer):
    """Blocking Mprobe(ANY_SOURCE) for the first push, then Improbe drains what else is there."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for r in self._recv:
            r.Free()
        self._recv = [_NoRecv() for _ in range(self.core.n_workers)]
        self._status = MPI.Status()

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
