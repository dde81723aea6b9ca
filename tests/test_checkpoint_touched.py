"""A tracked worker's checkpoint part from its touched keys, without MPI: the same part as the
dense capture's, bitwise, and no pass over a model-sized vector at the cut."""
import json

import h5py
import numpy as np
import pytest

from mpikanel.checkpoint import write_worker_part
from mpikanel.checkpoint.layout import put_array
from mpikanel.checkpoint.read import worker_state
from mpikanel.engine import worker_core as wc
from mpikanel.engine.key_tracker import KeySet, KeyTracker
from mpikanel.engine.sparse import KeyedVector
from mpikanel.hetero import HeteroSpec, Injector
from mpikanel.kernels import LazyDecay, bind, get_model, lazy_decay
from test_lazy_l2 import csr_problem as lazy_l2_problem

ARRAYS = ("unsent", "produced", "lazy_stamps")


def csr_problem(classes: int, rows: int = 300, d: int = 5000, seed: int = 0):
    """Power-law-ish CSR rows over d features, and labels (the lazy-L2 tests' problem, wider)."""
    return lazy_l2_problem(classes, rows, d, seed)


class Client:
    """Keeps the last sparse push's keys and values."""

    push_mode = "sparse"

    def __init__(self) -> None:
        self.sent = (np.zeros(0, dtype=np.int64), np.zeros(0))

    def pack_keys(self, keys: np.ndarray, values: np.ndarray) -> int:
        self.sent = (keys.copy(), values.copy())
        return 16 * keys.size


class Run:
    """One tracked worker and a server's parameters it pushes to; other workers move other keys."""

    def __init__(self, name: str, classes: int, l2: float, seed: int = 0, params: np.ndarray | None = None,
                 resume: dict | None = None, d: int = 5000) -> None:
        X, y, self.rng = csr_problem(classes, seed=seed, d=d)
        self.data = bind(get_model(name), X, y, classes)
        n = self.data.model.n_params(X.shape[1], classes)
        self.server = np.random.default_rng(seed).standard_normal(n) * 0.1 if params is None else params
        self.plan = wc.StepPlan(100, 16, 0.5, l2, classes)
        w = wc._Worker(Client(), self.server, wc.WorkerStats(rank=1, rows=self.data.rows, produced=np.zeros(n)),
                       Injector(HeteroSpec(), 1, 1), 1)
        w.cursor = wc.BatchCursor(self.data.rows, self.plan, np.random.default_rng(seed + 1))
        w.lazy = lazy_decay(self.data, l2)
        if resume is not None:
            w.restore(resume)
        w.track(KeyTracker(self.data, n))
        self.w, self.scratch, self.version = w, self.data.scratch(), 0

    def steps(self, k: int) -> None:
        for _ in range(k):
            idx = self.w.cursor.next()
            (self.w.lazy or self.data).step(self.w.local, idx, self.plan.lr, self.plan.l2, self.scratch)
            self.w.tracker.add_rows(idx)

    def exchange(self, dense_reply: bool = False, steps_in_flight: int = 2) -> None:
        """A push, steps while it is in flight, then the server's reply merged."""
        w = self.w
        w._frame_delta()
        keys, values = w.client.sent
        self.server[keys] += values
        other = self.rng.choice(self.server.size, 20, replace=False)
        self.server[other] += self.rng.standard_normal(20) * 1e-3
        self.steps(steps_in_flight)
        self.version += 2
        if dense_reply:
            reply = wc.Reply(self.server.copy(), self.version, 1, 0, 0.0, 0.0, 0.0, 0.0)
        else:
            rk = np.union1d(keys, other)
            reply = wc.Reply(self.server[rk].copy(), self.version, 1, 0, 0.0, 0.0, 0.0, 0.0, keys=rk)
        w.merge(reply)

    def train(self, rounds: int = 6) -> None:
        for r in range(rounds):
            self.steps(3)
            self.exchange(dense_reply=r == 2)
        self.steps(4)                    # unsent work at the cut

    def dense_capture(self) -> dict:
        """The part as an untracked worker captures it (model-sized vectors)."""
        keys, self.w.part_keys = self.w.part_keys, None
        try:
            return self.w.capture(finished=False)
        finally:
            self.w.part_keys = keys


def stored(path, part: dict) -> dict:
    """What a part holds on disk per array: ("keys", size, keys, values) or ("dense", bytes)."""
    entry = write_worker_part(path, 1, 0, part)
    out = {}
    with h5py.File(entry["path"], "r") as f:
        for name in ARRAYS:
            if name not in f:
                continue
            node = f[name]
            if isinstance(node, h5py.Group):
                out[name] = ("keys", int(node.attrs["size"]), node["keys"].dtype.str, node["keys"][()].tobytes(),
                             node["values"][()].tobytes())
            else:
                out[name] = ("dense", node[()].tobytes())
    return out


CASES = [("logistic", 2, 0.0), ("softmax", 4, 0.0), ("softmax", 4, 1e-2), ("svm", 3, 1e-2)]


@pytest.mark.parametrize("rounds", [0, 6])          # 0: every touched key is still unsent at the cut
@pytest.mark.parametrize("name,classes,l2", CASES)
def test_the_part_from_touched_keys_is_the_dense_capture_bitwise(tmp_path, name, classes, l2, rounds):
    run = Run(name, classes, l2)
    run.train(rounds)
    part, dense = run.w.capture(finished=False), run.dense_capture()
    assert all(isinstance(part[k], KeyedVector) for k in ARRAYS if k in part)
    assert ("lazy_stamps" in part) == (l2 > 0) and part["state"] == dense["state"]
    for k in ARRAYS:
        if k in dense:
            assert np.asarray(part[k]).tobytes() == np.asarray(dense[k]).tobytes(), k
    assert np.count_nonzero(dense["unsent"]) > 0 and (np.count_nonzero(dense["produced"]) > 0) == (rounds > 0)
    on_disk = stored(tmp_path / "touched", part)
    assert on_disk == stored(tmp_path / "dense", dense)
    assert all(v[0] == "keys" for v in on_disk.values())     # mostly zero: stored as keys and values
    if l2 > 0:
        assert np.count_nonzero(dense["lazy_stamps"]) > 0


def test_after_a_lazy_rebase_the_stamps_go_dense_and_a_flush_makes_them_sparse_again(tmp_path):
    run = Run("softmax", 4, 1e-2)
    run.train(3)
    run.w.lazy.rebase()                         # what a long run does once P falls below RENORM_BELOW
    run.steps(2)
    part, dense = run.w.capture(finished=False), run.dense_capture()
    assert isinstance(part["lazy_stamps"], np.ndarray)
    assert stored(tmp_path / "a", part) == stored(tmp_path / "b", dense)
    assert stored(tmp_path / "c", part)["lazy_stamps"][0] == "dense"
    run.w.flush_decay()
    run.exchange()
    run.steps(3)
    part, dense = run.w.capture(finished=False), run.dense_capture()
    assert isinstance(part["lazy_stamps"], KeyedVector)
    assert stored(tmp_path / "d", part) == stored(tmp_path / "e", dense)


@pytest.mark.parametrize("name,classes,l2", [("logistic", 2, 0.0), ("softmax", 4, 1e-2)])
def test_vectors_with_more_keys_than_a_part_stores_sparse_go_whole(tmp_path, name, classes, l2):
    run = Run(name, classes, l2, d=60)
    run.train()
    part = run.w.capture(finished=False)
    assert run.w.part_keys.produced.full and isinstance(part["produced"], np.ndarray)
    if l2 > 0:
        assert run.w.part_keys.stamped.full and isinstance(part["lazy_stamps"], np.ndarray)
    on_disk = stored(tmp_path / "a", part)
    assert on_disk == stored(tmp_path / "b", run.dense_capture())
    assert on_disk["produced"][0] == "dense"


@pytest.mark.parametrize("name,classes,l2", [("logistic", 2, 0.0), ("softmax", 4, 1e-2)])
def test_a_resumed_tracked_worker_cuts_the_same_parts_as_the_one_it_continues(tmp_path, name, classes, l2):
    run = Run(name, classes, l2)
    run.train(4)
    write_worker_part(tmp_path, 1, 0, run.w.capture(finished=False))
    saved = load_part(tmp_path)
    # the keys pushed before the cut are in the resumed worker's produced sum: tracking starts from them
    resumed = Run(name, classes, l2, params=run.server.copy(), resume=saved)
    assert resumed.w.local.tobytes() == (run.server + saved["unsent"]).tobytes()
    resumed.train(2)
    part = resumed.w.capture(finished=False)
    assert stored(tmp_path / "a", part) == stored(tmp_path / "b", resumed.dense_capture())


def load_part(directory) -> dict:
    """A worker part written by write_worker_part, read back as a resumed worker gets it."""
    path = next(directory.glob("ckpt-*/worker-00000.h5"))
    with h5py.File(path, "r") as f:
        state = f.attrs["state"]
    return worker_state({"state": json.loads(state), "part": str(path)})


class Guarded(np.ndarray):
    """An array that refuses any ufunc or nonzero over LIMIT entries or more (a model-sized pass)."""

    LIMIT = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out", ())
        for x in (*inputs, *out):
            if isinstance(x, Guarded) and x.size >= Guarded.LIMIT:
                raise AssertionError(f"a pass over a model-sized vector: {ufunc.__name__}.{method}")
        plain = [x.view(np.ndarray) if isinstance(x, Guarded) else x for x in inputs]
        if out:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, Guarded) else x for x in out)
        return getattr(ufunc, method)(*plain, **kwargs)

    def nonzero(self):
        if self.size >= Guarded.LIMIT:
            raise AssertionError("a pass over a model-sized vector: nonzero")
        return self.view(np.ndarray).nonzero()


@pytest.mark.parametrize("name,classes,l2", [("logistic", 2, 0.0), ("softmax", 4, 1e-2)])
def test_the_cut_of_a_tracked_worker_reads_no_model_sized_vector(tmp_path, monkeypatch, name, classes, l2):
    run = Run(name, classes, l2)
    run.train()
    w = run.w
    Guarded.LIMIT = w.lazy.stamps.size if w.lazy is not None else w.local.size // 2
    saved = w.local, w.base, w.at_send, w.stats.produced, w.lazy.stamps if w.lazy is not None else None
    w.local, w.base, w.at_send = (a.view(Guarded) for a in saved[:3])
    w.stats.produced = saved[3].view(Guarded)
    if w.lazy is not None:
        w.lazy.stamps = saved[4].view(Guarded)
    assert w.tracker.current().size < Guarded.LIMIT and w.part_keys.produced.n < Guarded.LIMIT

    def dense(*_a, **_k):
        raise AssertionError("densified")

    monkeypatch.setattr(KeyedVector, "dense", dense)
    monkeypatch.setattr(LazyDecay, "saved", dense)
    part = w.capture(finished=False)
    write_worker_part(tmp_path, 1, 0, part)
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="model-sized"):      # the guard does catch a dense capture
        run.dense_capture()
    w.local, w.base, w.at_send, w.stats.produced = saved[:4]
    if w.lazy is not None:
        w.lazy.stamps = saved[4]
    assert stored(tmp_path / "a", part) == stored(tmp_path / "b", run.dense_capture())


def test_a_keyed_vector_is_stored_as_the_same_vector_would_be(tmp_path):
    n = 5000
    rng = np.random.default_rng(0)
    for nnz in (0, 3, n // 4, n // 4 + 1, n):
        v = np.zeros(n)
        keys = np.sort(rng.choice(n, nnz, replace=False))
        v[keys] = rng.standard_normal(nnz)
        if nnz:
            v[keys[0]] = -0.0                          # -0.0 counts as nonzero
        candidates = np.union1d(keys, rng.choice(n, 50, replace=False))     # extra zero keys are dropped
        kv = KeyedVector.at(n, candidates, v[candidates])
        assert np.asarray(kv).tobytes() == v.tobytes()
        with h5py.File(tmp_path / f"{nnz}.h5", "w") as f:
            put_array(f, "keyed", kv)
            put_array(f, "dense", v)
            a, b = f["keyed"], f["dense"]
            assert type(a) is type(b)
            if isinstance(a, h5py.Group):
                assert a.attrs["size"] == b.attrs["size"] and a["keys"].dtype == b["keys"].dtype
                assert a["keys"][()].tobytes() == b["keys"][()].tobytes()
                assert a["values"][()].tobytes() == b["values"][()].tobytes()
            else:
                assert a[()].tobytes() == b[()].tobytes()


def test_a_key_set_keeps_each_key_once_and_grows():
    s = KeySet(10_000)
    s.add(np.array([5, 3, 5, 3, 9]))
    s.add(np.arange(0, 10_000, 3))
    s.add(np.array([], dtype=np.int64))
    assert s.sorted().tolist() == sorted(set([5, 9]) | set(range(0, 10_000, 3)))
    s.clear()
    assert s.n == 0 and not s.mark.any() and s.sorted().size == 0
    s = KeySet(100, limit=10)
    s.add(np.arange(10))
    assert not s.full and s.sorted().tolist() == list(range(10))
    s.add(np.array([3, 10]))
    assert s.full
    s.add(np.array([50]))
    s.clear()
    assert not s.full and s.n == 0 and not s.mark.any()
