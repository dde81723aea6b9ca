"""One machine, two test streams: scripts/test.sh runs the second MPI's end-to-end stage beside stage 1.
A test that measures time (paced runs, waits, stragglers) needs the cores to itself; the others can share.
A readers-writer lock on a file, writer-preferring: a test marked `alone` waits for the running
tests to end and keeps new ones from starting (the gate), then runs with the machine to itself."""
from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def machine_lock(path: str, alone: bool) -> Iterator[None]:
    """Hold `path` shared, or exclusively when `alone`, for the block; the gate (`path`.gate) makes an
    exclusive holder's wait end: no shared holder starts while one waits."""
    with open(path + ".gate", "a") as gate, open(path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)        # through the gate: none waits for the machine
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
