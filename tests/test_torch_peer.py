"""The PyTorch DDP peer (mpikanel.baselines.torch_ddp, the [peer] extra): its gradient is the
kernels', a 3-rank run trains on the shared budget, a paced run lasts its modeled steps, and
without PyTorch the module and the bench say so and exit 2.

PyTorch is an optional, bench-only extra that CI does not install: without it the tests that
need it skip with the reason, under CI too (not an error, unlike a missing MPI)."""
import subprocess
import sys

import numpy as np
import pytest

from launch import clean_env
from mpikanel.baselines import torch_ddp
from mpikanel.bench import sync as bench_sync
from mpikanel.kernels import bind, get_model
from mpikanel.session import start_params
from need import need

from test_baselines import N_ROWS, N_VAL, PACED, PACED_STEPS, TINY, _run

RANKS = 3


@pytest.fixture
def torch():
    """PyTorch, or a skip that says how to install it (never a CI error: CI does not install [peer])."""
    if not torch_ddp.torch_available():
        need("PyTorch", "PyTorch not installed: the torch-ddp peer needs the optional [peer] extra "
             "(pip install 'mpikanel[peer]')", required=False)
    import torch as module

    return module


def _data(rows=96, d=7, C=4, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, d)).astype(np.float32)
    return X, rng.integers(0, C, rows).astype(np.int32)


@pytest.mark.parametrize("name, hyper", [("softmax", {}), ("mlp", {"hidden": 5, "activation": "relu"}),
                                         ("mlp", {"hidden": 5, "activation": "tanh"})])
@pytest.mark.parametrize("batch_size", [32, 50])        # 50: the 32-row batch is a partial one
def test_the_torch_modules_gradient_is_the_numba_kernels_on_the_same_batch(torch, name, hyper, batch_size):
    X, y = _data()
    C, d = 4, X.shape[1]
    model = get_model(name, **hyper)
    n = model.n_params(d, C)
    rng = np.random.default_rng(7)
    w0 = start_params(model, n, d, C, 0) + 0.3 * rng.normal(size=n)       # away from the symmetric start
    idx = rng.permutation(X.shape[0])[:32].astype(np.int64)
    lr = 0.5
    bound = bind(model, X, y, C)
    w = w0.copy()
    bound.step(w, idx, lr * min(1.0, idx.size / batch_size), 0.0, bound.scratch())   # the kernels' partial-batch rate
    kernel_grad = (w0 - w) / lr
    flat = w0.copy()
    net, weights, biases = torch_ddp.make_net(name, flat, d, C, hyper.get("activation", "relu"))
    loss = torch_ddp.batch_loss(net, torch.from_numpy(X), torch.from_numpy(y.astype(np.int64)), idx, batch_size)
    loss.backward()
    torch_grad = torch_ddp.flat_gradient([*weights, *biases], flat)
    assert np.array_equal(flat, w0)                        # the module's parameters are views into flat
    np.testing.assert_allclose(torch_grad, kernel_grad, rtol=1e-5, atol=1e-8)
    # and its loss is the kernels' (sum over the rows / rows, unscaled for a full batch)
    if batch_size == 32:
        assert loss.item() == pytest.approx(bind(model, X[idx], y[idx], C).loss_sum(w0) / idx.size, rel=1e-6)


def test_an_unknown_model_is_refused(torch):
    with pytest.raises(Exception, match="torch-ddp has the models softmax, mlp"):
        torch_ddp.make_net("svm", np.zeros(10), 3, 2)


def test_three_ddp_ranks_train_on_exactly_the_shared_budget(torch, tmp_path):
    # DDP averages the 3 ranks' gradients: --lr 0.3 takes the allreduce baseline's steps at --lr 0.1
    s, m = _run("mpikanel.baselines.torch_ddp", RANKS, [*TINY, "--lr", "0.3", "--slowdown", "1:2"], tmp_path, "ddp")
    assert s["sync"] == "torch-ddp" and m["attrs"]["sync"] == "torch-ddp" and s["workers"] == RANKS
    assert s["framework"]["torch"].startswith("2.13.0") and s["framework"]["backend"] == "gloo"
    assert s["framework"]["torch_threads"] == 1
    n_train = N_ROWS - N_VAL                  # 6480 rows: 2160 a rank, 3 epochs of 34 steps (the last 48 rows)
    assert s["n_train"] == n_train and s["n_val"] == N_VAL and s["budget"] == "shared"
    assert s["samples"] == s["samples_budget"] == 3 * n_train
    assert [w["samples"] for w in s["per_worker"]] == [3 * n_train // RANKS] * RANKS
    assert all(w["steps"] == w["pushes"] == 3 * 34 for w in s["per_worker"])
    curve = m["curve"]
    assert curve["val_loss"][-1] < 0.6 * curve["val_loss"][0] and len(curve["time_s"]) >= 3
    assert s["test_loss"] < 0.6 * curve["test_loss"][0]
    assert s["test_accuracy"] > 0.8 and s["val_accuracy"] > 0.8           # 10 classes: chance is 0.1
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    assert by_rank[1]["slowdown"] == 2.0 and by_rank[1]["injected_s"] > 0
    assert by_rank[2]["injected_s"] == by_rank[3]["injected_s"] == 0.0
    assert all(w["comm_s"] > 0 and w["wait_s"] >= 0 and "step_time_rel" in w for w in s["per_worker"])


def test_the_first_ddp_step_is_the_numba_kernels_summed_step(torch, tmp_path):
    # one step from the same start on the same batches: DDP's mean gradient x 3 x 0.3 is the
    # allreduce baseline's sum of the three ranks' numba steps at 0.3, to rounding
    args = [*TINY, "--max-steps", "1", "--snapshot-interval", "10"]
    ddp, _ = _run("mpikanel.baselines.torch_ddp", RANKS, [*args, "--lr", "0.9"], tmp_path, "first-ddp")
    ref, _ = _run("mpikanel.baselines.allreduce_sgd", RANKS, [*args, "--lr", "0.3"], tmp_path, "first-ar")
    assert ddp["samples"] == ref["samples"] == RANKS * 64
    assert ddp["params_norm"] > 0.05                                       # it moved from zero
    for key in ("params_norm", "train_loss", "test_loss", "val_loss"):
        assert ddp[key] == pytest.approx(ref[key], rel=1e-6), key


def test_a_paced_ddp_run_lasts_its_modeled_steps_and_waits_for_its_straggler(torch, tmp_path):
    step = 0.03
    s, m = _run("mpikanel.baselines.torch_ddp", RANKS, [*PACED, "--step-time", str(step), "--slowdown", "1:3"],
                tmp_path, "paced")
    assert s["step_time"] == step and s["pacing_held"] is not None and m["summary"]["step_time"] == step
    factors = {1: 3.0}
    for w in s["per_worker"]:
        assert w["steps"] == PACED_STEPS
        assert w["paced_s"] == pytest.approx(factors.get(w["rank"], 1.0) * step * PACED_STEPS)
        assert w["compute_s"] + w["injected_s"] + w["pacing_s"] >= w["paced_s"] - 1e-9
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    assert by_rank[1]["injected_s"] == pytest.approx(2 * step * PACED_STEPS, rel=0.05)
    assert by_rank[2]["wait_s"] > 0.5 * 2 * step * PACED_STEPS           # the others wait for rank 1 each step
    assert s["wall_s"] >= 3 * step * PACED_STEPS


# --- without PyTorch, and the bench's model table: no torch needed --------------------------------

NO_TORCH = "import runpy, sys; sys.modules['torch'] = None; sys.argv = {argv!r}; runpy.run_module({module!r}, " \
           "run_name='__main__')"


def _without_torch(module, argv):
    return subprocess.run([sys.executable, "-c", NO_TORCH.format(argv=argv, module=module)], capture_output=True,
                          text=True, timeout=120, env=clean_env())


def test_without_pytorch_the_peer_says_how_to_install_it_and_exits_2():
    proc = _without_torch("mpikanel.baselines.torch_ddp", ["torch_ddp", *TINY])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"torch_ddp: error: {torch_ddp.MISSING}"]
    assert "mpikanel[peer]" in proc.stderr


def test_without_pytorch_bench_sync_refuses_torch_ddp_and_exits_2(tmp_path):
    proc = _without_torch("mpikanel.bench", ["bench", "sync", "--quick", "--allow-dirty", "--models", "bsp", "torch-ddp",
                                             "--out", str(tmp_path / "out")])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("mpikanel bench sync: error: model torch-ddp needs torch, "
                                                    "which is not installed: pip install 'mpikanel[peer]'")
    assert not (tmp_path / "out").exists()


def test_bench_sync_knows_torch_ddp_but_does_not_run_it_by_default():
    recipe = bench_sync.model_run("torch-ddp", 5)
    assert recipe.module == "mpikanel.baselines.torch_ddp" and recipe.flags == () and recipe.lr_scale == 5.0
    assert bench_sync._model_spec("torch-ddp") == "torch-ddp"
    assert "torch-ddp" not in bench_sync.DEFAULT_MODELS
