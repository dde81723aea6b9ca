"""The checkpoint cut without MPI or files: the coordinator alone, and the server core driving it
over a fake transport that records what it was asked to write and commit."""
import numpy as np
import pytest

from mpikanel.checkpoint import CheckpointControl, CheckpointCoordinator, CutState, ServerPart
from mpikanel.config import make_policy
from mpikanel.engine.budget import Budget
from mpikanel.engine.messages import Flag
from mpikanel.engine.server_core import Push, ServerCore


class FakeIO:
    """Parts and manifests kept in lists, in the order they were asked for."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.manifests: list[dict] = []

    def write_own(self, seq: int, part: ServerPart) -> dict:
        self.log.append(("own", seq))
        return {"file": "server-0.h5", "role": "server", "index": 0, "bytes": 1, "seq": seq, "write_s": 0.0,
                "version": part.meta["version"], "params": part.params.copy()}

    def commit(self, seq: int, reason: str, final: bool, entries: list[dict], elapsed_s: float) -> str:
        self.log.append(("commit", seq))
        self.manifests.append({"seq": seq, "reason": reason, "final": final, "entries": entries})
        return f"ckpt-{seq:06d}"


class FakePeers:
    """One other server rank: begins its part when asked, its entry comes back on the wait."""

    def __init__(self, io: FakeIO) -> None:
        self.io = io

    def begin_parts(self, seq: int):
        self.io.log.append(("peers", seq))
        return lambda: [{"file": "server-1.h5", "role": "server", "index": 1, "bytes": 1, "seq": seq, "write_s": 0.0}]


def entry(w: int, seq: int) -> dict:
    return {"file": f"worker-{w:05d}.h5", "role": "worker", "index": w, "bytes": 1, "seq": seq, "write_s": 0.0}


def coordinator(io: FakeIO, n: int = 2, every_steps: int = 0, stop=lambda: False) -> CheckpointCoordinator:
    c = CheckpointCoordinator(CheckpointControl(every_steps=every_steps), io, n, clock=lambda: 0.0,
                              stop_requested=stop)
    return c


def part() -> ServerPart:
    return ServerPart(np.zeros(2), None, {"version": 0}, {})


def test_a_cut_begins_when_its_interval_has_passed_and_not_before():
    c = coordinator(FakeIO(), every_steps=10)
    assert c.begin(0.0, 9) is None and c.state is CutState.IDLE
    cut = c.begin(0.0, 10)
    assert cut is not None and cut.reason == "periodic" and cut.seq == 1 and c.holding()
    assert c.begin(0.0, 11) is cut              # one cut at a time


def test_a_signal_or_a_pushed_stop_makes_a_stop_cut():
    c = coordinator(FakeIO(), stop=lambda: True)
    assert c.begin(0.0, 0).stop
    c = coordinator(FakeIO())
    assert c.begin(0.0, 0) is None
    c.stop_pushed()
    cut = c.begin(0.0, 0)
    assert cut.reason == "stop" and cut.stop


def test_collect_takes_every_answered_worker_at_a_cut_and_only_the_leaving_ones_otherwise():
    c = coordinator(FakeIO(), n=3, every_steps=1)
    assert c.collect([0, 2], [False, True], 0.0) == [2]
    c.begin(1.0, 1)
    assert c.collect([0, 1, 2], [False, False, False], 2.0) == [0, 1, 2]
    assert c.collecting() and c.cut.answered_at - c.cut.asked_at == 1.0


def test_the_manifest_is_committed_once_after_every_part_and_lists_every_worker():
    io = FakeIO()
    c = coordinator(io, every_steps=1)
    c.peers = FakePeers(io)
    assert c.write(0.0, 0, part()) is None and io.log == []      # no cut collecting: nothing is written
    c.begin(0.0, 1)
    c.collect([0, 1], [False, False], 0.0)
    c.entries_in({0: entry(0, 1), 1: entry(1, 1)})
    cut = c.write(0.0, 1, part())
    assert cut.seq == 1 and io.log == [("peers", 1), ("own", 1), ("commit", 1)]
    files = [e["file"] for e in io.manifests[0]["entries"]]
    assert files == ["server-0.h5", "server-1.h5", "worker-00000.h5", "worker-00001.h5"]
    assert c.state is CutState.IDLE and c.seq == 2 and len(c.written) == 1
    assert c.begin(0.0, 1) is None              # the interval restarted at the cut


def test_a_worker_that_left_is_linked_from_its_last_entry_and_a_missing_one_refuses_the_commit():
    io = FakeIO()
    c = coordinator(io, every_steps=1)
    c.entries_in({0: entry(0, 1)})              # worker 0 left earlier
    c.begin(0.0, 1)
    c.collect([1], [False], 0.0)
    with pytest.raises(RuntimeError, match=r"workers \[1\]"):
        c.write(0.0, 1, part())
    assert ("commit", 1) not in io.log
    c.entries_in({1: entry(1, 1)})
    c.write(0.0, 1, part())
    assert [e["seq"] for e in io.manifests[0]["entries"] if e["role"] == "worker"] == [1, 1]


# --- the server core driving the coordinator, as a transport would ----------------------------

def core_with(io: FakeIO, sync: str = "asp", n: int = 2, every_steps: int = 0) -> ServerCore:
    c = ServerCore(np.zeros(3), make_policy(sync, n_workers=n), n, Budget(n, None, 10),
                   checkpoints=coordinator(io, n, every_steps))
    return c


def push(w: int, clock: int, last: bool = False, stop: bool = False) -> Push:
    return Push(w, clock, 1, 10, 0, 0.001, last=last, stop_request=stop, delta=np.full(3, 1.0))


def test_the_core_holds_every_worker_for_a_cut_then_answers_all_with_checkpoint_and_writes_after_entries():
    io = FakeIO()
    c = core_with(io, every_steps=3)
    for w in (0, 1):
        c.on_push(push(w, 1), 0.0)
    assert len(c.on_tick(0.0).replies) == 2     # 2 steps: no cut yet
    c.on_push(push(0, 2), 0.1)
    out = c.on_tick(0.1)                        # 3 steps: the cut begins
    assert out.replies == [] and not out.cut    # worker 0 is held until worker 1 has pushed
    c.on_push(push(1, 2), 0.2)
    out = c.on_tick(0.2)
    assert [s.answer.w for s in out.replies] == [0, 1] and out.collect == [0, 1] and out.cut
    assert all(s.answer.flags & Flag.CHECKPOINT and s.answer.seq == 1 for s in out.replies)
    assert io.log == []                         # nothing is written before the entries are in
    out = c.on_entries({w: entry(w, 1) for w in (0, 1)}, 0.3)
    assert io.log == [("own", 1), ("commit", 1)] and not out.stop
    assert io.manifests[0]["entries"][0]["version"] == 4        # the cut is after all four deltas


def test_a_pushed_stop_request_cuts_then_stops_the_run():
    io = FakeIO()
    c = core_with(io)
    c.on_push(push(0, 1, stop=True), 0.0)
    assert c.on_tick(0.0).replies == []
    c.on_push(push(1, 1), 0.1)
    out = c.on_tick(0.1)
    assert out.listen == [] and all(s.answer.flags & Flag.STOP for s in out.replies)
    assert c.on_entries({w: entry(w, 1) for w in (0, 1)}, 0.2).stop
    assert io.manifests[-1]["reason"] == "stop"
    c.finish(0.3)
    assert len(io.manifests) == 1               # stopped: no end checkpoint after the stop cut


def test_leaving_workers_are_collected_and_the_end_checkpoint_lists_them_all():
    io = FakeIO()
    c = core_with(io)
    for w in (0, 1):
        c.on_push(push(w, 1, last=True), 0.0)
    out = c.on_tick(0.0)
    assert out.collect == [0, 1] and not out.cut and out.stop
    c.on_entries({w: entry(w, 1) for w in (0, 1)}, 0.0)
    assert io.manifests == []
    c.finish(0.1)
    assert io.manifests[0]["reason"] == "end" and io.manifests[0]["final"]
    assert [e["index"] for e in io.manifests[0]["entries"] if e["role"] == "worker"] == [0, 1]


def test_cut_timings_are_on_the_core_clock_whatever_the_coordinators_clock_origin():
    io = FakeIO()
    ticks = iter(range(1000, 2000))             # a clock far from the core's origin, 1 s a reading
    c = ServerCore(np.zeros(3), make_policy("asp", n_workers=2), 2, Budget(2, None, 10),
                   checkpoints=CheckpointCoordinator(CheckpointControl(every_steps=3), io, 2,
                                                     clock=lambda: float(next(ticks))))
    c.start(0.0)
    # the core's clock has run 50 s (a first snapshot, say) while the coordinator's read a few ticks
    for w, k, now in ((0, 1, 50.0), (1, 1, 50.0), (0, 2, 50.1), (1, 2, 50.2)):
        c.on_push(push(w, k), now)
        c.on_tick(now)
    c.on_entries({w: entry(w, 1) for w in (0, 1)}, 50.3)
    (w,) = c.checkpoints.written
    assert w["hold_s"] == pytest.approx(0.1) and 0.1 < w["write_s"] < 10     # entries 0.1 s later, then ticks
    assert w["pause_s"] == pytest.approx(w["hold_s"] + w["write_s"])
    assert io.manifests[0]["entries"] and io.log[-1] == ("commit", 1)
