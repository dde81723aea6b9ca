"""Server 0's checkpoint cut, as a typed state machine: begin, hold, collect entries, write parts,
commit the manifest.

The server core asks :meth:`CheckpointCoordinator.begin` at every tick whether a cut starts
(an interval passed, a worker or this rank was signalled), holds the workers while the cut is
HOLDING, and asks :meth:`collect` whose manifest entries the transport must receive with the
answers. Once they are in (:meth:`entries_in`), :meth:`write` has the other server ranks begin
their parts, writes this rank's own, waits for theirs and commits the manifest last, only when
every part (servers and every worker, including those that left) has an entry. All file and
message work goes through :class:`CheckpointIO` and :class:`PeerParts`, so the decisions run and
are tested without MPI or files.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from .control import CheckpointControl


class CutState(enum.Enum):
    """Where the coordinator is in a cut."""

    IDLE = "idle"              # no cut: workers are answered as their policy says
    HOLDING = "holding"        # a cut began: every worker is held until all active ones have pushed
    COLLECTING = "collecting"  # the cut's answers went out: their workers' entries come back, then write


@dataclass
class Cut:
    """One consistent cut: its number, why, whether the run stops after it, and when it held."""

    seq: int
    reason: str              # 'periodic', 'stop' or 'end'
    stop: bool = False       # the run ends after this cut (a signal; resume later)
    asked_at: float = 0.0    # when the cut began holding
    answered_at: float = 0.0  # when every held worker was answered


@dataclass
class ServerPart:
    """What server 0 writes of itself at a cut: its key range, what it scaled away, its book."""

    params: np.ndarray
    unapplied: np.ndarray | None
    meta: dict
    arrays: dict[str, np.ndarray]


class PeerParts(Protocol):
    """The other server ranks (K > 1), as the transport reaches them."""

    def begin_parts(self, seq: int) -> Callable[[], list[dict]]:
        """Have the other servers write their parts of checkpoint `seq`; returns the wait for their entries."""
        ...


class CheckpointIO(Protocol):
    """Where parts and the manifest go (files, in a run; a list, in the tests)."""

    def write_own(self, seq: int, part: ServerPart) -> dict:
        """Write server 0's part of checkpoint `seq`; its manifest entry."""
        ...

    def commit(self, seq: int, reason: str, final: bool, entries: list[dict], elapsed_s: float) -> str:
        """Commit the manifest of checkpoint `seq` over every part's entry (last); its path."""
        ...


class NoPeers:
    """A single server: no other parts to wait for."""

    def begin_parts(self, seq: int) -> Callable[[], list[dict]]:
        """Nothing to begin; the wait returns no entries."""
        return list


@dataclass
class CheckpointCoordinator:
    """Decides and performs server 0's checkpoint cuts (see the module docstring)."""

    control: CheckpointControl
    io: CheckpointIO
    n_workers: int
    clock: Callable[[], float]                  # seconds, any origin (the timings are differences)
    stop_requested: Callable[[], bool] = lambda: False
    entries: dict[int, dict] = field(default_factory=dict)   # each worker's latest part (manifest entry)
    peers: PeerParts = field(default_factory=NoPeers)
    elapsed_before_s: float = 0.0               # training seconds of the run resumed from
    written: list[dict] = field(default_factory=list)        # each committed checkpoint: where, size, timings
    state: CutState = CutState.IDLE
    cut: Cut | None = None
    _stop_pushed: bool = False

    def stop_pushed(self) -> None:
        """A worker was signalled (its push said so): the next cut stops the run."""
        self._stop_pushed = True

    def begin(self, now: float, steps: int) -> Cut | None:
        """The cut in progress, or one that begins now (a signal, or an interval has passed)."""
        if self.state is not CutState.IDLE:
            return self.cut
        if self.stop_requested():
            self._stop_pushed = True
        reason = "stop" if self._stop_pushed else self.control.due(now, steps)
        if reason is None:
            return None
        self.cut = Cut(self.control.seq, reason, stop=self._stop_pushed, asked_at=now)
        self.state = CutState.HOLDING
        return self.cut

    def holding(self) -> bool:
        """Whether workers are held for a cut (answered only once every active one has pushed)."""
        return self.state is CutState.HOLDING

    def collecting(self) -> bool:
        """Whether a cut was answered and waits for its entries (then :meth:`write`)."""
        return self.state is CutState.COLLECTING

    def collect(self, released: list[int], leaving: list[bool], now: float) -> list[int]:
        """Workers answered now whose entries the transport must receive: all of them at a cut,
        else those leaving (a finished worker's last state is linked into later checkpoints)."""
        if self.state is CutState.HOLDING:
            self.state = CutState.COLLECTING
            assert self.cut is not None
            self.cut.answered_at = now
            return list(released)
        return [w for w, last in zip(released, leaving) if last]

    def entries_in(self, entries: dict[int, dict]) -> None:
        """The manifest entries of the workers :meth:`collect` listed."""
        self.entries.update(entries)

    def write(self, now: float, steps: int, part: ServerPart) -> Cut | None:
        """Write and commit the cut whose entries are in (None if no cut is collecting); the
        intervals restart and the next cut gets the next number."""
        if self.state is not CutState.COLLECTING:
            return None
        cut = self.cut
        assert cut is not None
        self._commit(cut, part, final=False, now=now)
        self.control.written(now, steps)
        self.state, self.cut = CutState.IDLE, None
        return cut

    @property
    def seq(self) -> int:
        """The number the next checkpoint (or the one being cut) gets."""
        return self.control.seq

    def final(self, now: float, part: ServerPart) -> None:
        """The end-of-run checkpoint, from every worker's last entry."""
        self._commit(Cut(self.control.seq, "end", asked_at=now, answered_at=now), part, final=True, now=now)

    def _commit(self, cut: Cut, part: ServerPart, final: bool, now: float) -> None:
        # `now` is on the core's clock, as are the cut's times; :attr:`clock` only measures how long
        # the writing takes from here (its origin differs from the core's)
        missing = [w for w in range(self.n_workers) if w not in self.entries]
        if missing:
            raise RuntimeError(f"checkpoint {cut.seq}: no part from workers {missing[:10]}")
        t_own = self.clock()
        others = self.peers.begin_parts(cut.seq)        # the other servers write theirs meanwhile
        entries = [self.io.write_own(cut.seq, part)]
        own_s = self.clock() - t_own
        entries += others()
        entries += [self.entries[w] for w in range(self.n_workers)]
        path = self.io.commit(cut.seq, cut.reason, final, entries, self.elapsed_before_s + now + self.clock() - t_own)
        done = now + self.clock() - t_own
        # hold: the cut waiting for every worker's push; write: from its answers to the commit
        self.written.append({"path": str(path), "seq": cut.seq, "reason": cut.reason, "files": len(entries),
                             "bytes": sum(int(e["bytes"]) for e in entries),
                             "hold_s": cut.answered_at - cut.asked_at, "write_s": done - cut.answered_at,
                             "server0_part_s": own_s,
                             "slowest_part_s": max(e["write_s"] for e in entries if e.get("seq") == cut.seq),
                             "pause_s": done - cut.asked_at})
