"""Bench-only receive loops for the parameter server (rank side only).

Imported only by the ``_server_ranks`` entry point. Each variant replaces only how the MPI
server learns which workers pushed (``_wait_some`` of comm.server.ParameterServer);
the core, the decoding and the replies are the real server's.
"""
from __future__ import annotations

import time

from mpi4py import MPI

from mpikanel.comm.server import ParameterServer


class TestsomeServer(ParameterServer):
    """Poll with Testsome; sleep briefly when nothing arrived."""

    sleep_s = 50e-6

    def _wait_some(self, requests: list[MPI.Request], statuses: list[MPI.Status]) -> list[int]:
        while True:
            done = MPI.Request.Testsome(requests, statuses)
            if done is None or done:
                return done
            time.sleep(self.sleep_s)


class WaitanyServer(ParameterServer):
    """Block in Waitany: one push per wake-up."""

    def _wait_some(self, requests: list[MPI.Request], statuses: list[MPI.Status]) -> list[int]:
        status = MPI.Status()
        i = MPI.Request.Waitany(requests, status)
        statuses[:] = [status]
        return [] if i == MPI.UNDEFINED else [i]


VARIANTS = {"testsome": TestsomeServer, "waitany": WaitanyServer}
