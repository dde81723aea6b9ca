"""Lazy L2 on CSR rows: the same model as eager decay, sparse frames that stay sparse, the flushes."""
import numpy as np
import pytest
from numba import njit

from mpikanel.config import make_config
from mpikanel.engine import worker_core as wc
from mpikanel.engine.key_tracker import KeyTracker
from mpikanel.hetero import HeteroSpec, Injector
from mpikanel.kernels import CSR, bind, get_model, lazy, lazy_decay, register_model, unregister_model
from mpikanel.model_io import load_model
from mpikanel.sim.run import SimOptions, simulate

LINEAR = [("logistic", 2), ("softmax", 4), ("svm", 3), ("lsq", 3)]
RTOL = 1e-9


def csr_problem(classes: int, rows: int = 300, d: int = 800, seed: int = 0):
    """Power-law-ish CSR rows (a few frequent features, many rare ones) and labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 9, rows)
    cols = [np.unique(np.minimum(d - 1, rng.zipf(1.3, n) - 1)) for n in lengths]
    indptr = np.concatenate([[0], np.cumsum([c.size for c in cols])]).astype(np.int64)
    X = CSR(indptr, np.concatenate(cols), rng.random(indptr[-1]).astype(np.float32) + 0.1, (rows, d))
    return X, rng.integers(0, classes, rows).astype(np.int32), rng


def assert_close(a: np.ndarray, b: np.ndarray) -> None:
    """Equal within RTOL of the vector's scale (elementwise, so tiny weights count too)."""
    scale = float(np.max(np.abs(b)))
    assert scale > 0
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * scale * 1e-3)


def lazy_vs_eager(name: str, classes: int, rate, l2: float = 1e-2, steps: int = 400):
    """Run the same steps eagerly and lazily (flushed at the end); (eager, lazy, changed-key check)."""
    X, y, rng = csr_problem(classes)
    data = bind(get_model(name), X, y, classes)
    n = data.model.n_params(X.shape[1], classes)
    eager = rng.standard_normal(n) * 0.1
    w = eager.copy()
    decay = lazy_decay(data, l2)
    assert decay is not None
    scratch = data.scratch()
    U = decay.units
    for t in range(steps):
        idx = rng.choice(X.shape[0], 16, replace=False).astype(np.int64)
        data.step(eager, idx, rate(t, steps), l2, scratch)
        before = w.copy()
        decay.step(w, idx, rate(t, steps), l2, scratch)
        # a lazy step changes only the weights of its rows' features and the biases
        touched = np.zeros(n, dtype=bool)
        for i in idx:
            for j in X.indices[X.indptr[i]:X.indptr[i + 1]]:
                touched[j * U:(j + 1) * U] = True
        touched[X.shape[1] * U:] = True
        assert not (w != before)[~touched].any()
    assert decay.pending()
    keys = decay.flush(w)
    assert not decay.pending() and keys.size > 0 and np.all(np.diff(keys) > 0)
    return eager, w


def constant(t, steps):
    return 0.5


def scheduled(t, steps):
    """A warm-up then a linear decay: every step at another rate."""
    return 0.8 * min((t + 1) / 40, 1.0 - t / steps) + 1e-3


@pytest.mark.parametrize("rate", [constant, scheduled])
@pytest.mark.parametrize("name,classes", LINEAR)
def test_lazy_decay_equals_eager_decay(name, classes, rate):
    eager, w = lazy_vs_eager(name, classes, rate)
    assert_close(w, eager)


def test_the_running_product_is_rebased_without_changing_the_model(monkeypatch):
    monkeypatch.setattr(lazy, "RENORM_BELOW", 0.9)         # rebase every ~10 steps at lr*l2 = 0.01
    rebases = []
    real = lazy.LazyDecay.rebase
    monkeypatch.setattr(lazy.LazyDecay, "rebase", lambda self: (rebases.append(1), real(self)))
    eager, w = lazy_vs_eager("softmax", 4, constant, l2=0.02)
    assert len(rebases) > 10
    assert_close(w, eager)


def test_stamps_are_capped_so_a_long_missed_decay_catches_up_to_zero_not_nan():
    X, y, rng = csr_problem(2, rows=20, d=50)
    data = bind(get_model("logistic"), X, y, 2)
    decay = lazy_decay(data, 1e-4)
    w = np.ones(51)
    decay.prod[0] = 1e-200
    decay.rebase()
    decay.prod[0] = 1e-200
    decay.rebase()
    assert np.isfinite(decay.stamps).all() and decay.stamps.max() == lazy.STAMP_MAX
    decay.flush(w)
    assert np.isfinite(w).all() and np.abs(w[:50]).max() < 1e-250 and w[50] == 1.0


def test_lazy_decay_only_for_csr_rows_with_l2_and_a_lazy_model():
    X, y, _ = csr_problem(3, rows=20, d=30)
    softmax = get_model("softmax")
    assert lazy_decay(bind(softmax, X, y, 3), 1e-4) is not None
    assert lazy_decay(bind(softmax, X, y, 3), 0.0) is None
    assert lazy_decay(bind(softmax, X.toarray(), y, 3), 1e-4) is None
    assert lazy_decay(bind(get_model("mlp", hidden=4), X, y, 3), 1e-4) is None    # the MLP stays eager
    data = bind(softmax, X, y, 3)
    assert KeyTracker.usable(data, 1e-4, "sparse", lazy=True)
    assert not KeyTracker.usable(data, 1e-4, "sparse") and not KeyTracker.usable(data, 1e-4, "dense", lazy=True)


@njit
def _logistic_grad_csr(w, indptr, indices, data, d, y, idx, n_classes, out):
    inv = 1.0 / idx.shape[0]
    for k in range(idx.shape[0]):
        i = idx[k]
        z = w[d]
        for p in range(indptr[i], indptr[i + 1]):
            z += w[indices[p]] * data[p]
        r = (1.0 / (1.0 + np.exp(-z)) - y[i]) * inv
        for p in range(indptr[i], indptr[i + 1]):
            out[indices[p]] += r * data[p]
        out[d] += r


@njit
def _no_loss(w, X, y, n_classes):
    return 0.0


@njit
def _no_loss_csr(w, indptr, indices, data, d, y, n_classes):
    return 0.0


@njit
def _no_grad(w, X, y, idx, n_classes, out):
    pass


@pytest.mark.parametrize("csr_keys", [True, False])
def test_a_registered_model_gets_lazy_decay_when_it_declares_csr_keys(csr_keys):
    name = f"lazy_test_{csr_keys}"
    model = register_model(name, _no_grad, _no_loss, lambda d, c: d + 1, grad_csr=_logistic_grad_csr,
                           loss_sum_csr=_no_loss_csr, n_weights=lambda d, c: d, max_classes=2, csr_keys=csr_keys)
    try:
        X, y, rng = csr_problem(2)
        data = bind(model, X, y, 2)
        decay = lazy_decay(data, 1e-2)
        assert (decay is not None) == csr_keys and data.tracks_keys == csr_keys
        if not csr_keys:
            return
        eager = rng.standard_normal(X.shape[1] + 1) * 0.1
        w = eager.copy()
        for t in range(300):
            idx = rng.choice(X.shape[0], 16, replace=False).astype(np.int64)
            data.step(eager, idx, scheduled(t, 300), 1e-2, data.scratch())
            decay.step(w, idx, scheduled(t, 300), 1e-2, data.scratch())
        decay.flush(w)
        assert_close(w, eager)
    finally:
        unregister_model(name)


def lazy_worker(data, params: np.ndarray, plan, rng) -> "wc._Worker":
    """A worker core's state without a client: a cursor, lazy decay, tracked keys."""
    n = params.size
    w = wc._Worker(None, params, wc.WorkerStats(rank=1, rows=data.rows, produced=np.zeros(n)),
                   Injector(HeteroSpec(), 1, 1), 1)
    w.cursor = wc.BatchCursor(data.rows, plan, rng)
    w.lazy = lazy_decay(data, plan.l2)
    w.track(KeyTracker(data, n))
    return w


def steps(w: "wc._Worker", data, plan, eager: np.ndarray | None = None, n: int = 10) -> None:
    """n lazy steps of the worker (its keys tracked), and the same steps eagerly on `eager`."""
    scratch = data.scratch()
    for _ in range(n):
        idx = w.cursor.next()
        if eager is not None:
            data.step(eager, idx, plan.lr, plan.l2, scratch)
        w.lazy.step(w.local, idx, plan.lr, plan.l2, scratch)
        w.tracker.add_rows(idx)


def test_a_checkpoint_part_holds_the_lazy_state_and_a_restored_worker_continues_alike():
    X, y, rng = csr_problem(4)
    data = bind(get_model("softmax"), X, y, 4)
    params = rng.standard_normal(data.model.n_params(X.shape[1], 4)) * 0.1
    plan = wc.StepPlan(1, 16, 0.5, 1e-2, 4)
    w = lazy_worker(data, params, plan, np.random.default_rng(1))
    eager = params.copy()
    steps(w, data, plan, eager)
    before = w.local.copy()
    part = w.capture(finished=False)
    # the checkpoint changes nothing in the run: no flush, the stamps travel with the part
    assert w.lazy.pending() and np.array_equal(w.local, before)
    assert part["state"]["lazy_prod"] == w.lazy.prod[0] and np.count_nonzero(part["lazy_stamps"]) > 0
    # a reshaped restart folds in what the worker still owed: the eagerly decayed model
    from mpikanel.kernels.lazy import owed_decay
    local = params + part["unsent"]
    assert_close(local + owed_decay(local, part["lazy_stamps"], part["state"]["lazy_prod"]), eager)
    resumed = lazy_worker(data, params, plan, np.random.default_rng(99))
    resumed.restore(part)
    assert np.array_equal(resumed.lazy.stamps, w.lazy.stamps) and resumed.lazy.prod[0] == w.lazy.prod[0]
    for worker in (w, resumed):
        steps(worker, data, plan, n=5)
        worker.flush_decay()
    assert_close(resumed.local, w.local)


def test_a_reshaped_restart_folds_in_the_decay_each_lazy_worker_owed(tmp_path):
    from mpikanel import checkpoint as ck

    X, y, rng = csr_problem(2, d=2000)
    data = bind(get_model("logistic"), X, y, 2)
    params = rng.standard_normal(X.shape[1] + 1) * 0.1
    plan = wc.StepPlan(1, 16, 0.5, 1e-2, 2)
    w = lazy_worker(data, params, plan, rng)
    eager = params.copy()
    steps(w, data, plan, eager)
    part = w.capture(finished=False)
    part["state"]["schedule"]["unsent_samples"] = 0
    old = ck.Checkpoint(params=params, initial=params.copy(), config={"budget": "shared"}, ranks=2, sync="bsp",
                        model="logistic", server={"version": 10, "policy": {}, "budget": {"counted": 160}},
                        server_arrays={}, workers=[part], seq=1)
    saved = ck.load(ck.save(tmp_path, old))        # the stamps go through the part (stored sparse)
    assert np.array_equal(saved.workers[0]["lazy_stamps"], part["lazy_stamps"])
    assert_close(ck.reshape(saved, 3).params, eager)


def test_the_last_push_flushes_and_the_tracker_carries_the_flushed_keys():
    X, y, rng = csr_problem(3)
    data = bind(get_model("svm"), X, y, 3)
    params = rng.standard_normal(data.model.n_params(X.shape[1], 3)) * 0.1
    plan = wc.StepPlan(1, 16, 0.5, 1e-2, 3)
    w = lazy_worker(data, params, plan, rng)
    steps(w, data, plan)
    w.tracker.take()                      # as a push would
    w.at_send[:] = w.local
    before = w.local.copy()
    w.flush_decay()
    assert not w.lazy.pending()
    changed = np.flatnonzero(w.local != before)
    assert changed.size > 0 and np.isin(changed, w.tracker.current()).all()


def sim(workers: int, **overrides) -> dict:
    """A simulated run (the real worker and server cores, no MPI) on a power-law sparse problem."""
    cfg = {"model": "logistic", "data": "synthetic-sparse", "synthetic_features": 20000, "synthetic_rows": 4000,
           "epochs": 2, "lr": 0.5, "l2": 1e-3, "sync": "bsp", "quiet": True, "progress": "off", **overrides}
    return simulate(make_config(cfg), SimOptions(workers, step_time=1e-3))


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_one_worker_ends_with_the_eagerly_decayed_model(schedule, tmp_path, monkeypatch):
    """One worker: lazy and eager decay give the same server model (the last push is flushed)."""
    lazy_run = sim(1, push="sparse", lr_schedule=schedule, save_model=str(tmp_path / "lazy.h5"))
    monkeypatch.setattr(wc, "lazy_decay", lambda data, l2: None)
    eager_run = sim(1, push="sparse", lr_schedule=schedule, save_model=str(tmp_path / "eager.h5"))
    lazy_w, eager_w = (load_model(tmp_path / f).params for f in ("lazy.h5", "eager.h5"))
    assert_close(lazy_w, eager_w)
    # eager decay changes every weight touched so far at every step: each frame carries them all
    assert lazy_run["bytes_per_push"] < eager_run["bytes_per_push"] / 5


def test_sparse_frames_stay_sparse_under_l2_and_match_dense_frames():
    sparse, dense, no_l2 = sim(4, push="sparse"), sim(4, push="dense"), sim(4, push="sparse", l2=0.0)
    # as sparse as without L2 but for the last push of each worker (its flush: every touched weight)
    assert sparse["bytes_per_push"] < 1.5 * no_l2["bytes_per_push"]
    assert sparse["bytes_per_push"] < dense["bytes_per_push"] / 5      # 20k features; 56x at 200k
    assert sparse["params_sha256"] == dense["params_sha256"]      # BSP: the same sums in the same order
    assert abs(sparse["test_loss"] - dense["test_loss"]) <= 1e-9 * dense["test_loss"]


SPARSE_RUN = ["--sync", "bsp", "--data", "synthetic-sparse", "--synthetic-features", "100000", "--synthetic-rows",
              "16000", "--epochs", "1", "--model", "logistic", "--lr", "0.5"]     # the default --l2 1e-4


def test_mpi_bsp_with_lazy_l2_is_bitwise_across_runs_servers_frames_checkpoints_and_resumes(tmp_path):
    """One model for: a run, the same run again taking checkpoints (they hold the workers' stamps:
    nothing is flushed), 2 servers, dense frames, and a run resumed from the first checkpoint."""
    from launch import checkpoints, run_train

    ck = tmp_path / "ck"
    runs = {}
    for tag, n, extra in (("sparse", 3, ["--push", "sparse"]),
                          ("checkpointed", 3, ["--push", "sparse", "--checkpoint-dir", str(ck), "--checkpoint-every",
                                               "40steps", "--keep-checkpoints", "10"]),
                          ("servers2", 4, ["--push", "sparse", "--servers", "2"]), ("dense", 3, ["--push", "dense"]),
                          ("resumed", 3, ["--push", "sparse", "--resume", "FIRST"])):
        if tag == "resumed":
            paths = checkpoints(ck)
            assert len(paths) >= 2
            extra[-1] = str(paths[0])
        proc, runs[tag] = run_train(n, *SPARSE_RUN, *extra, tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert runs[tag]["delta_sum_rel_error"] < 1e-9
    assert runs["resumed"]["resumed_from"] == str(paths[0])
    first = runs["sparse"]["params_sha256"]
    assert {tag: s["params_sha256"] for tag, s in runs.items()} == {tag: first for tag in runs}
    assert runs["sparse"]["config"]["l2"] == 1e-4
    # each worker's last push carries its flush (every weight it touched): short runs pay most for it
    assert runs["sparse"]["bytes_per_push"] < runs["dense"]["bytes_per_push"] / 20
