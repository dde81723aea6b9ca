"""End-to-end runs of the kernel library under mpiexec: MLP on Fashion-MNIST, libsvm (CSR) data,
the user-defined model example, divergence reporting, and the config plumbing for the models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch import clean_env, mpiexec, run_train
from need import needs_fashion

from mpikanel.config import config_from_args
from mpikanel.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
#: the stated accuracy: MLP (64 ReLU units, 5 epochs, BSP, 3 workers) on the full Fashion-MNIST test set;
#: BSP is bitwise reproducible, so this does not depend on how the ranks were scheduled (measured 0.8588,
#: softmax 0.8337; under ASP the MLP landed anywhere in 0.845-0.86)
MLP_FASHION_ACCURACY = 0.85



def _env() -> dict[str, str]:
    return clean_env(NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(ROOT / ".numba-cache")))


def test_config_model_flags():
    c = config_from_args(["--model", "mlp", "--hidden", "16", "--activation", "tanh"], print_errors=False)
    assert (c.model, c.hidden, c.activation) == ("mlp", 16, "tanh")
    assert config_from_args(["--model", "lsq"], print_errors=False).hidden == 64
    for bad in (["--model", "nope"], ["--activation", "sigmoid"]):
        with pytest.raises(SystemExit):
            config_from_args(bad, print_errors=False)
    with pytest.raises(InputError, match="--hidden"):
        config_from_args(["--hidden", "0"], print_errors=False)


@pytest.mark.slow
@needs_fashion
def test_mlp_beats_softmax_on_fashion_mnist_with_4_ranks(tmp_path):
    common = ["--data", "fashion-mnist", "--epochs", "5", "--sync", "bsp", "--lr", "0.1"]
    proc, mlp = run_train(4, *common, "--model", "mlp", tmp_path=tmp_path, env=_env())
    assert proc.returncode == 0, proc.stderr
    proc, soft = run_train(4, *common, "--model", "softmax", tmp_path=tmp_path, env=_env())
    assert proc.returncode == 0, proc.stderr
    print(f"fashion-mnist 4 ranks: mlp {mlp['test_accuracy']:.4f}, softmax {soft['test_accuracy']:.4f}")
    assert mlp["n_params"] == 64 * (784 + 10 + 1) + 10
    assert mlp["test_accuracy"] >= MLP_FASHION_ACCURACY
    assert mlp["test_accuracy"] > soft["test_accuracy"] + 0.01
    # non-zero (Glorot) start: the no-lost-work check compares against params - initial
    assert mlp["deltas_sent"] == mlp["deltas_applied"]
    assert mlp["delta_sum_rel_error"] < 1e-9


def _write_sparse_libsvm(path: Path, n: int, d: int, nnz: int, classes: int) -> None:
    import numpy as np

    rng = np.random.default_rng(5)
    teacher = rng.standard_normal((d, classes)) * 6.0
    lines = []
    for _ in range(n):
        cols = np.sort(rng.choice(d, nnz, replace=False))
        vals = rng.random(nnz) + 0.05
        z = vals @ teacher[cols] / np.sqrt(nnz) + rng.gumbel(size=classes)
        lines.append(f"{int(np.argmax(z))} " + " ".join(f"{c + 1}:{v:.4f}" for c, v in zip(cols, vals)))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["svm", "mlp"])
def test_libsvm_trains_on_csr_shards(tmp_path, model):
    data = tmp_path / "sparse.svm"
    _write_sparse_libsvm(data, 6000, 3000, 30, 3)
    proc, s = run_train(3, "--data", str(data), "--model", model, "--epochs", "5", "--lr", "1.0",
                        "--hidden", "16", "--batch-size", "32", "--sync", "bsp", tmp_path=tmp_path, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert s["n_features"] == 3000 and s["n_classes"] == 3
    # BSP: the same accuracy on every run, whatever the timing (SSP once ended at 0.52 on a loaded node)
    assert s["test_accuracy"] > 0.55, s["test_accuracy"]   # chance is ~0.33
    assert s["deltas_sent"] == s["deltas_applied"] and s["delta_sum_rel_error"] < 1e-9


@pytest.mark.slow
def test_custom_model_example_runs(tmp_path):
    out = tmp_path / "custom.json"
    cmd = [mpiexec(), "-n", "3", sys.executable, str(ROOT / "examples" / "custom_model.py"),
           "--sync", "asp", "--summary-json", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(), cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hang: {' '.join(cmd)}\n{exc.stderr}")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())
    assert s["model"] == "sqhinge" and s["sync"] == "asp" and s["workers"] == 2
    assert s["test_accuracy"] > 0.8
    assert "SQHINGE" in proc.stdout.upper()


@pytest.mark.slow
def test_diverging_lsq_names_rank_and_step(tmp_path):
    proc, _ = run_train(3, "--model", "lsq", "--lr", "1e8", "--synthetic-rows", "10000", "--epochs", "1",
                        tmp_path=tmp_path, env=_env(), timeout=120)
    assert proc.returncode != 0
    assert "produced non-finite parameters at step" in proc.stderr
    assert "rank " in proc.stderr


_USER_MODEL_PROCESS = """
import runpy, sys
import numpy as np
how = sys.argv[1]
if how == "import":
    sys.path.insert(0, sys.argv[2])
    import custom_model                                       # module name 'custom_model'
else:
    runpy.run_path(sys.argv[2] + "/custom_model.py", run_name=how)   # not in sys.modules
from mpikanel.kernels import CSR, bind, get_model, warmup
model = get_model("sqhinge")
warmup(model)
rng = np.random.default_rng(0)
X = rng.standard_normal((300, 6)).astype(np.float32)
y = (X[:, 0] - X[:, 1] > 0).astype(np.int32)
w = np.zeros(7)
for b in (bind(model, X, y, 2), bind(model, CSR.from_dense(X), y, 2)):
    for _ in range(100):
        b.step(w, rng.integers(0, 300, 16).astype(np.int64), 0.05, 1e-4, b.scratch())
    print(b.correct(w), repr(b.loss_sum(w)))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_user_model_from_two_module_names_shares_one_numba_cache(tmp_path):
    """The example's model registered from runpy (its module not importable), as module 'custom_model', and
    from runpy under another name, all in one NUMBA_CACHE_DIR: every process trains, with identical results."""
    env = clean_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    outs = []
    for how in ("runpy_user_a", "import", "runpy_user_b"):
        proc = subprocess.run([sys.executable, "-c", _USER_MODEL_PROCESS, how, str(ROOT / "examples")],
                              capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0, f"{how}: {proc.stderr[-2000:]}"
        outs.append(proc.stdout)
    assert len(set(outs)) == 1, outs
    lines = outs[0].split()
    assert int(lines[0]) > 270 and int(lines[2]) > 270   # trained (chance ~150 of 300)
