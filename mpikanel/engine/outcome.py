"""The server core's side of the core/transport contract: what one event asks the transport to do.

The core is called once per event (``on_push``, ``on_tick``, ``on_entries``, ...) and answers
with an :class:`Outcome`; the transport performs it in the order of its fields and never reads
the core's members. The same outcomes drive the MPI server loop and the simulator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .messages import Answer


@dataclass
class Send:
    """One reply: its header and the range it carries, read from a snapshot of ``params`` at the
    answer's version (or only ``params[answer.keys]``, a sparse reply)."""

    answer: Answer
    params: np.ndarray      # this server's live range: the transport copies or sends it before the next push


@dataclass
class Outcome:
    """What the transport does after one call to the core, in this order."""

    sleep_s: float = 0.0                                 # injected service time of the push (--server-delay)
    replies: list[Send] = field(default_factory=list)    # rank order
    free: list[int] = field(default_factory=list)        # workers whose push frames take the next push now
    listen: list[int] = field(default_factory=list)      # workers whose next push the server now waits for
    ops: list[tuple[int, int, int]] = field(default_factory=list)   # decisions the other servers replay, in order
    gather: np.ndarray | None = None   # (``on_end`` only) the whole parameter vector: fill the other
                                       # servers' ranges of it, then call ``finish``
    collect: list[int] = field(default_factory=list)     # workers whose checkpoint entries to receive (``on_entries``)
    cut: bool = False             # those entries complete a checkpoint cut: ``on_entries`` writes it
    stop: bool = False            # the run ends after this (every worker has left, or a stop checkpoint)
