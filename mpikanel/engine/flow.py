"""Flow control of large pushes, without MPI: which worker may send its push into which frame.

A worker's push is a message of up to the whole model. When more workers push at once than
the server has receives posted, the rest arrive unexpected, and an MPI may copy each into
memory of its own until a receive matches it: Intel MPI's shared-memory transport does, so a
server at 64 workers held about one model copy per worker (docs/results.md). Under flow control
a worker first sends a header-less ASK; the server answers GO once a frame of its pool is
posted for that worker alone, and only then does the push move. The server holds at most its
pool's frames, whatever the number of workers, for one small round trip per push. It also keeps
at most FLOW_SNAPSHOTS reply snapshots (mpikanel.comm.server.ReplySnapshots): with 64
asynchronous workers a server otherwise kept up to 8 copies of the model for replies still
being received.
"""
from __future__ import annotations

from collections import deque

#: push frames a server posts at start; its pool grows past this only while pushes are held
POOL_START = 4
#: under flow control a server starts with this many push frames (an ask waits for one, not MPI's memory)
FLOW_FRAMES = 2
#: and keeps at most this many reply snapshots (the oldest one's replies land before another is taken)
FLOW_SNAPSHOTS = 2
#: after a GO a waiting server tests at the shortest pause for this long: the push is one hop away
GRANTED_POLL_S = 2e-3
#: --flow-control choices
FLOW_CONTROL = ("auto", "on", "off")
#: ``auto`` turns flow control on for dense pushes of at least this many bytes per server
FLOW_MIN_BYTES = 1 << 20


def flow_controlled(setting: str, push_mode: str, range_bytes: int, n_workers: int,
                    pool_start: int = POOL_START) -> bool:
    """Whether pushes ask first: ``on``/``off`` as given; ``auto`` for dense frames of at least
    FLOW_MIN_BYTES per server with more workers than the pool starts with (sparse frames carry
    what a worker touched, small by design: force ``on`` where they are not)."""
    if setting not in FLOW_CONTROL:
        raise ValueError(f"flow control {setting!r}: expected one of {', '.join(FLOW_CONTROL)}")
    if setting != "auto":
        return setting == "on"
    return push_mode == "dense" and range_bytes >= FLOW_MIN_BYTES and n_workers > pool_start


def polls_for_granted(granted: int, since_go_s: float) -> bool:
    """Whether a waiting server tests at the shortest pause: a push it told GO is due (its arrival
    forecast, mpikanel.engine.arrivals, learns the asks' times, not the pushes')."""
    return granted > 0 and since_go_s < GRANTED_POLL_S


class Grants:
    """The server's book of asks and frames: a free frame goes to the longest-waiting ask.

    Frames are numbered from 0; a grant may name frame ``frames - 1`` just added (the pool grows
    one frame at a time, only when nothing could land otherwise, as under BSP, whose pushes are
    held until the round is complete)."""

    def __init__(self, frames: int, limit: int) -> None:
        self.frames, self.limit = frames, limit
        self.free: deque[int] = deque(range(frames))
        self.asks: deque[int] = deque()
        self.granted = 0            # pushes granted and not yet landed

    def asked(self, w: int) -> None:
        """Worker w asks to push."""
        self.asks.append(w)

    def landed(self) -> None:
        """A granted push landed in its frame (the frame is held until released)."""
        self.granted -= 1

    def released(self, frame: int) -> None:
        """A frame's push was used up: it can take the next one."""
        self.free.append(frame)

    def grant(self, grow: bool) -> list[tuple[int, int]]:
        """The (worker, frame) pairs to grant now, oldest ask first. With ``grow`` (the server is
        about to wait) add a frame when asks wait, none is free and no granted push can land."""
        if grow and self.asks and not self.free and not self.granted and self.frames < self.limit:
            self.free.append(self.frames)
            self.frames += 1
        out = []
        while self.asks and self.free:
            out.append((self.asks.popleft(), self.free.popleft()))
        self.granted += len(out)
        return out
