"""Sparse push/pull decisions without MPI: frame choice, packing, and the keys a reply carries."""
import numpy as np
import pytest

from mpikanel.engine.budget import Budget
from mpikanel.engine.server_core import Push, ServerCore
from mpikanel.engine.sparse import KeyLog, ReplyKeys, capacity, effective_mode, pack, unpack, use_sparse
from mpikanel.config import make_policy


def test_auto_goes_sparse_only_where_keys_and_values_are_smaller_than_the_range():
    assert use_sparse("auto", 49, 100) and not use_sparse("auto", 50, 100)
    assert use_sparse("sparse", 100, 100) and not use_sparse("dense", 0, 100)
    assert capacity("sparse", 10) == 20 and capacity("auto", 10) == 10
    assert effective_mode("auto", sparse_data=False) == "dense"
    assert effective_mode("auto", sparse_data=True) == "auto"
    assert effective_mode("sparse", sparse_data=False) == "sparse"
    with pytest.raises(ValueError, match="push mode"):
        effective_mode("csr", True)


def test_pack_and_unpack_round_trip_keys_and_values_exactly():
    payload = np.zeros(8)
    keys, values = np.array([0, 5, 2**40]), np.array([-0.0, 1e-300, np.pi])
    pack(payload, keys, values)
    k, v = unpack(payload, 3)
    assert k.tolist() == keys.tolist() and v.tobytes() == values.tobytes()


def test_key_log_gives_keys_changed_after_a_version_and_none_when_it_cannot_know():
    log = KeyLog(100, version=3)
    log.record(4, np.array([1, 7]))
    log.record(5, np.array([7, 9]))
    assert log.since(3).tolist() == [1, 7, 9]
    assert log.since(4).tolist() == [7, 9]
    assert log.since(5).tolist() == []
    assert log.since(2) is None                 # before the log began
    log.record(6, None)                         # a dense apply: every key changed
    assert log.since(5) is None and log.since(6).tolist() == []
    small = KeyLog(100, limit=3)
    small.record(1, np.array([1, 2]))
    small.record(2, np.array([3, 4]))           # 4 keys > limit: version 1's entry goes
    assert small.since(0) is None and small.since(1).tolist() == [3, 4]
    empty = KeyLog(10)                          # pushes that changed nothing (a worker with no rows left)
    empty.record(1, np.zeros(0, dtype=np.int64))
    empty.record(2, np.zeros(0, dtype=np.int64))
    assert empty.since(0).tolist() == []


def test_key_log_keeps_its_own_copy_of_keys_read_from_a_frame():
    frame = np.array([1, 2, 3])
    log = KeyLog(10)
    log.record(1, frame)
    frame[:] = 9                                # the next push overwrites the frame
    assert log.since(0).tolist() == [1, 2, 3]


@pytest.mark.parametrize("limit", [None, 12])
def test_workers_pulling_only_changed_keys_hold_exactly_the_server_parameters(limit):
    """Random sparse and dense pushes from 4 workers in random order: after every reply the
    worker's copy, updated at the reply's keys only, equals the server's parameters bitwise."""
    rng = np.random.default_rng(7)
    n, nw = 60, 4
    server = rng.standard_normal(n)
    copies = [server.copy() for _ in range(nw)]
    replies = ReplyKeys("auto", n, nw)
    replies.log.limit = limit if limit is not None else n
    version = sparse_replies = 0
    for _ in range(400):
        w = int(rng.integers(nw))
        for _ in range(int(rng.integers(0, 3))):        # other workers' pushes land first
            version += 1
            if rng.random() < 0.05:
                server += rng.standard_normal(n)
                replies.applied(version, None)
            else:
                keys = np.unique(rng.integers(0, n, int(rng.integers(1, 6))))
                server[keys] += rng.standard_normal(keys.size)
                replies.applied(version, keys)
        keys = replies.reply(w, version)
        if keys is None:
            copies[w][:] = server
        else:
            copies[w][keys] = server[keys]
            sparse_replies += 1
        assert copies[w].tobytes() == server.tobytes()
    assert sparse_replies > 100


def _core(mode: str, params: np.ndarray) -> ServerCore:
    core = ServerCore(params, make_policy("bsp"), 2, Budget(2, None, 1), push_mode=mode)
    core.start(0.0)
    return core


def test_bsp_core_sums_sparse_pushes_as_it_sums_the_same_pushes_dense():
    rng = np.random.default_rng(1)
    dense, sparse = _core("dense", np.zeros(50)), _core("auto", np.zeros(50))
    for clock in range(1, 6):
        for w in (1, 0):
            keys = np.unique(rng.integers(0, 50, 6))
            values = rng.standard_normal(keys.size)
            full = np.zeros(50)
            full[keys] = values
            dense.on_push(Push(w, clock, 1, 1, clock - 1, 0.01, delta=full), 0.0)
            sparse.on_push(Push(w, clock, 1, 1, clock - 1, 0.01, delta=values, keys=keys), 0.0)
        a_dense, a_sparse = ([s.answer for s in c.on_tick(0.0).replies] for c in (dense, sparse))
        assert [a.keys for a in a_dense] == [None, None]
        # each worker's reply carries both workers' keys: what changed since its last reply
        assert all(a.keys is not None and a.keys.size <= 12 for a in a_sparse)
    assert dense.params.tobytes() == sparse.params.tobytes()


@pytest.mark.parametrize("name,classes", [("logistic", 2), ("softmax", 4), ("svm", 3)])
def test_tracked_keys_cover_every_key_a_csr_step_changes(name, classes):
    from mpikanel.engine.key_tracker import KeyTracker
    from mpikanel.kernels import CSR, bind, get_model

    rng = np.random.default_rng(3)
    rows, d = 40, 300
    lengths = rng.integers(1, 6, rows)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(d, n, replace=False)) for n in lengths]).astype(np.int32)
    X = CSR(indptr, indices, rng.random(indptr[-1]).astype(np.float32), (rows, d))
    model = get_model(name)
    data = bind(model, X, rng.integers(0, classes, rows).astype(np.int32), classes)
    n = model.n_params(d, classes)
    w = rng.standard_normal(n) * 0.1
    tracker = KeyTracker(data, n)
    assert KeyTracker.usable(data, 0.0, "auto")
    assert not KeyTracker.usable(data, 1e-4, "auto") and not KeyTracker.usable(data, 0.0, "dense")
    scratch = data.scratch()
    before = w.copy()
    for _ in range(3):
        idx = rng.choice(rows, 8, replace=False).astype(np.int64)
        data.step(w, idx, 0.5, 0.0, scratch)
        tracker.add_rows(idx)
    changed = np.flatnonzero(w != before)
    keys = tracker.take()
    assert changed.size > 0 and np.isin(changed, keys).all()
    assert np.array_equal(keys, np.unique(keys)) and keys.size < n / 4
    assert tracker.take().size == 0 and not tracker.mark.any()


def test_permuted_features_train_the_same_model_and_save_it_in_the_datas_own_order(tmp_path):
    from mpikanel import load_model
    from mpikanel.data import DataSpec, describe, feature_permutation, load_test, unpermute_linear
    from mpikanel.errors import InputError
    from mpikanel.model_io import save_model

    spec = DataSpec(source="synthetic-sparse", synthetic_rows=400, synthetic_features=500, seed=4)
    info = describe(spec)
    raw = load_test(spec, info)
    permuted = load_test(DataSpec(**{**spec.__dict__, "permute_features": True}), info)
    perm = feature_permutation(500, 4)
    assert sorted(perm.tolist()) == list(range(500)) and not np.array_equal(perm, np.arange(500))
    assert np.array_equal(permuted.X.indices, perm[raw.X.indices]) and np.array_equal(permuted.y, raw.y)
    # a model trained on the permuted columns, saved, scores raw rows as it scored permuted ones
    rng = np.random.default_rng(0)
    params = rng.standard_normal(501)
    # the weight of the data's column c is the trained weight of column perm[c]; the bias stays
    assert np.array_equal(unpermute_linear(params, 500, 4), np.append(params[:500][perm], params[500]))
    path = save_model(tmp_path / "m.h5", params, {"model": "logistic", "permute_features": "on", "seed": 4},
                      500, info.label_values)
    on_permuted = load_model(tmp_path / "m.h5")
    on_permuted.params[:] = params            # what the run's own (permuted) evaluation used
    on_permuted.W, on_permuted.b = params[:500].reshape(500, 1), params[500:]
    saved = load_model(path)
    assert np.allclose(saved.decision_function(raw.X), on_permuted.decision_function(permuted.X))
    with pytest.raises(InputError, match="needs sparse"):
        load_test(DataSpec(source="synthetic", synthetic_rows=100, permute_features=True),
                  describe(DataSpec(source="synthetic", synthetic_rows=100)))


def test_permuted_features_need_a_linear_model():
    from mpikanel.config import make_config
    from mpikanel.errors import InputError
    from mpikanel.session import describe_checked

    cfg = {"data": "synthetic-sparse", "synthetic_rows": 200, "synthetic_features": 50, "permute_features": "on"}
    describe_checked(make_config({**cfg, "model": "logistic"}), 2, 1)
    with pytest.raises(InputError, match="needs a linear model"):
        describe_checked(make_config({**cfg, "model": "mlp"}), 2, 1)
    with pytest.raises(InputError, match="on or off"):
        make_config({**cfg, "permute_features": "yes"})
