"""Loss-curve snapshots with several servers, without MPI: server 0 snapshots its own range and
sends its decisions as ops; the other servers keep their ranges at the same points of the op
order, and the pieces, sent at the end, make the same curve as one server's whole snapshots."""
import numpy as np
import pytest

from mpikanel.config import make_policy
from mpikanel.engine.follower_core import FollowerCore
from mpikanel.engine.messages import Op
from mpikanel.engine.server_core import Push, ServerCore
from mpikanel.engine.servermap import ServerMap
from mpikanel.metrics import REPLACE, THIN, SnapshotPieces, SnapshotRecorder, evaluate_curve

N_PARAMS, N_WORKERS, ROUNDS = 11, 3, 40


def control(ops):
    buf = np.zeros(1 + 3 * len(ops), dtype=np.int64)
    buf[0] = len(ops)
    if ops:
        buf[1:] = np.asarray(ops, dtype=np.int64).ravel()
    return buf


def run_bsp(servers: int, recorder_args: dict):
    """A BSP run of ROUNDS rounds on a virtual clock (the same pushes and times for any K); returns
    server 0's recorder (whole snapshots), every outcome's gather field while serving, and the ops."""
    rng = np.random.default_rng(7)
    initial = rng.standard_normal(N_PARAMS)
    smap = ServerMap(N_PARAMS, servers)
    recorder = SnapshotRecorder(**recorder_args)
    core = ServerCore(initial.copy(), make_policy("bsp", n_workers=N_WORKERS), N_WORKERS, recorder=recorder)
    followers = [FollowerCore(initial[smap.range(k)].copy(), N_WORKERS) for k in range(1, servers)]
    if servers > 1:
        core.lead(smap.range(0), None)
    deltas: dict[int, np.ndarray] = {}
    gathers, ops = [], []

    def replay(out):
        ops.extend(out.ops)
        for k, f in enumerate(followers, start=1):
            f.add_ops(control(out.ops))
            while (a := f.next()) is not None:
                if a.op is Op.APPLY:
                    f.apply(deltas[a.w][smap.range(k)].copy(), float(a.arg))

    replay(core.start(0.0))
    now = 0.0
    for r in range(ROUNDS):
        for w in range(N_WORKERS):
            now += 0.0131 * (1 + w)
            deltas[w] = rng.standard_normal(N_PARAMS) * 1e-2
            for f in followers:
                f.push_arrived(w)
            out = core.on_push(Push(w, r + 1, 1, 10, core.book.version, 0.01, last=r == ROUNDS - 1,
                                    delta=deltas[w][smap.range(0)].copy()), now)
            gathers.append(out.gather)
            replay(out)
            out = core.on_tick(now)
            gathers.append(out.gather)
            replay(out)
    assert core.done
    end = core.on_end(now)
    replay(end)
    core.finish(now)
    pieces = [f.snapshots for f in followers]
    assert all(len(p) == len(recorder) for p in pieces)

    def fill(i, whole):
        for k, p in enumerate(pieces, start=1):
            whole[smap.range(k)] = p.pieces[i]

    assert core.assemble_snapshots(fill) == (len(recorder) if servers > 1 else 0)
    return recorder, gathers, ops


@pytest.mark.parametrize("recorder_args", [
    {"interval_s": 0.05, "max_snapshots": 6},                         # thinned by count
    {"interval_s": 0.05, "max_bytes": 4 * N_PARAMS * 5},              # thinned by the whole vector's bytes
    {"interval_s": 1e-9},                                             # every tick, the end replacing the last
])
@pytest.mark.parametrize("servers", [2, 3])
def test_pieces_assemble_to_the_curve_of_one_server(servers, recorder_args):
    one, _, _ = run_bsp(1, recorder_args)
    many, gathers, ops = run_bsp(servers, recorder_args)
    assert len(many) == len(one) >= 3
    for a, b in zip(one, many):
        assert (a.time_s, a.version, a.pushes) == (b.time_s, b.version, b.pushes)
        assert b.params.shape == (N_PARAMS,) and np.array_equal(a.params, b.params)   # bitwise (BSP)
    assert many.interval_s == one.interval_s

    def loss(p):
        return float(np.log1p(np.sum(p ** 2)))

    c1, ck = evaluate_curve(one, loss, None), evaluate_curve(many, loss, None)
    assert len(c1["test_loss"]) == len(ck["test_loss"])
    np.testing.assert_allclose(ck["test_loss"], c1["test_loss"], rtol=0, atol=1e-12)
    assert np.array_equal(ck["version"], c1["version"])
    # nothing gathered while serving: the snapshots went as ops, the ranges come only at the end
    assert all(g is None for g in gathers)
    snaps = [op for op in ops if op[0] == Op.SNAPSHOT]
    assert len(snaps) >= len(many)
    if "max_snapshots" in recorder_args or "max_bytes" in recorder_args:
        assert any(op[2] & THIN for op in snaps)           # the case thins: the others must thin alike
    if recorder_args["interval_s"] < 1e-6:
        assert snaps[-1][2] & REPLACE                      # the end state replaced the last tick's


def test_pieces_repeat_the_decisions():
    p = SnapshotPieces()
    for i in range(5):
        p.take(0, np.full(2, float(i)))
    p.take(THIN, np.full(2, 5.0))                     # keeps 0, 2, 4, then 5
    p.take(REPLACE, np.full(2, 6.0))                  # 5 replaced
    assert [float(x[0]) for x in p.pieces] == [0.0, 2.0, 4.0, 6.0]
    assert all(x.dtype == np.float32 for x in p.pieces)
