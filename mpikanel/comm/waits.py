"""Waits that sleep: test the requests, then sleep a backoff that grows with the time waited.

MPI's own blocking waits poll: an idle Intel MPI rank costs 0.2-0.3 of a core even with
I_MPI_WAIT_MODE=1 and I_MPI_THREAD_YIELD=3, which on an oversubscribed node (16-64 paced ranks
on 2 cores) takes the CPU from the ranks that compute. These loops test, and between tests sleep
about a tenth of the time waited so far (50 us to 5 ms): a short wait ends within tens of
microseconds of its message, a long one costs about 1% of a core (docs/mpi.md). The servers'
waits also poll when a push is due (mpikanel.engine.arrivals).
"""
from __future__ import annotations

import time
from typing import Callable

from mpi4py import MPI

from ..engine.arrivals import pause_after


def wait_all(requests: list[MPI.Request]) -> None:
    """MPI.Request.Waitall, sleeping between tests."""
    t0 = None
    while not _test_all(requests):
        now = time.perf_counter()
        t0 = now if t0 is None else t0
        time.sleep(pause_after(now - t0))


def _test_all(requests: list[MPI.Request]) -> bool:
    # one Testall may take in only one arrived message (Intel MPI): test as often as there are requests
    return any(MPI.Request.Testall(requests) for _ in range(max(1, len(requests))))


def wait_some(requests: list[MPI.Request], statuses: list[MPI.Status] | None = None,
              pause: Callable[[float, float], float] | None = None) -> list[int] | None:
    """MPI.Request.Waitsome, sleeping between tests: the completed indices (None if none is active).

    ``pause(now, waited_s)`` gives each sleep (default: the backoff, :func:`pause_after`)."""
    t0 = None
    while True:
        done = MPI.Request.Testsome(requests, statuses)
        if done is None or done:
            return done
        now = time.perf_counter()
        t0 = now if t0 is None else t0
        time.sleep(pause_after(now - t0) if pause is None else pause(now, now - t0))


def barrier(comm: MPI.Comm) -> None:
    """A barrier whose waiting ranks sleep between tests (Ibarrier, then wait_all)."""
    wait_all([comm.Ibarrier()])
