"""A server rank k > 0: replays server 0's decisions on its own key range (pure, no MPI).

Server 0 keeps the one book (clocks, policy, budget, plans, cuts) and sends the others its
decisions as ops, in its order: apply worker w's delta with this scale, answer worker w now,
keep a snapshot of your range for the loss curve, send your range, end. A worker pushes one
slice to every server at once, so an op may arrive before the slice it is about: the follower
then waits for that push, and never reorders. The parameters on every server therefore go
through exactly the versions server 0's range does, and its snapshot pieces are taken at the
versions server 0's snapshots are.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..metrics import SnapshotPieces
from .apply import apply_delta
from .messages import Op, bits_scale
from .sparse import ReplyKeys


@dataclass
class Action:
    """What the transport must do next: the op, its worker and argument, and what it sends."""

    op: Op
    w: int
    arg: int | float
    version: int = 0                        # REPLY: the version the range is at
    params: np.ndarray | None = None        # REPLY, SLICE, CHECKPOINT: this rank's range
    keys: np.ndarray | None = None          # REPLY: a sparse reply's keys (None: the whole range)
    unapplied: np.ndarray | None = None     # SLICE, CHECKPOINT: what this rank scaled away (None: nothing)
    deltas_applied: int = 0                 # END: deltas this rank applied


class FollowerCore:
    """Orders server 0's ops against the pushes that have arrived; applies deltas to ``params``."""

    def __init__(self, params: np.ndarray, n_workers: int, push_mode: str = "dense",
                 unapplied: np.ndarray | None = None) -> None:
        """``unapplied``: what this range had scaled away at the checkpoint resumed from."""
        self.params = params
        self.n_workers = n_workers
        self.version = 0                    # deltas applied since this rank started (server 0 counts on)
        self.replies = ReplyKeys(push_mode, params.size, n_workers)
        self.unapplied = unapplied
        self.arrived = np.zeros(n_workers, dtype=bool)
        self.ops: deque[tuple[int, int, int]] = deque()
        self.ended = False
        self.deltas_applied = 0
        self.snapshots = SnapshotPieces()    # this range of server 0's loss-curve snapshots

    def add_ops(self, buf: np.ndarray) -> None:
        """Queue the ops of one CONTROL message (int64 ``[n, kind, w, arg, ...]``)."""
        n = int(buf[0])
        for i in range(n):
            kind, w, arg = (int(x) for x in buf[1 + 3 * i: 4 + 3 * i])
            self.ops.append((kind, w, arg))

    def push_arrived(self, w: int) -> None:
        """Worker w's slice is here (it stays until server 0's REPLY for w is done)."""
        self.arrived[w] = True

    def next(self) -> Action | None:
        """The next op that can run now, removed from the queue; None while it waits for a push."""
        if not self.ops:
            return None
        kind, w, arg = self.ops[0]
        op = Op(kind)
        if op in (Op.APPLY, Op.REPLY) and not self.arrived[w]:
            return None
        self.ops.popleft()
        if op is Op.APPLY:
            return Action(op, w, bits_scale(arg))
        if op is Op.REPLY:
            self.arrived[w] = False
            return Action(op, w, arg, self.version, self.params, self.replies.reply(w, self.version))
        if op is Op.SNAPSHOT:       # server 0's snapshot of its range, made at this point of its order
            self.snapshots.take(int(arg), self.params)
        if op is Op.END:
            self.ended = True
        return Action(op, w, arg, self.version, self.params, unapplied=self.unapplied,
                      deltas_applied=self.deltas_applied)

    def apply(self, delta: np.ndarray, scale: float, keys: np.ndarray | None = None) -> None:
        """Add one delta, the range or values at ``keys`` (scaled as server 0 scaled it; the rest
        is kept as unapplied), in the same operations as server 0 so the sums match bitwise."""
        if scale != 1.0 and self.unapplied is None:
            self.unapplied = np.zeros_like(self.params)
        apply_delta(self.params, delta, scale, keys, self.unapplied)
        self.version += 1
        self.deltas_applied += 1
        self.replies.applied(self.version, keys)

