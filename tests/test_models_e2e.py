"""Models from --model py:FILE:FACTORY end to end under mpiexec: every sync model, K servers,
bitwise BSP for a seed, checkpoint resume, saved models that predict without MPI, one-line errors."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from launch import checkpoints, run_train
from mpikanel import load_model
from mpikanel.data import DataSpec, describe, load_test
from test_cli_errors import assert_clean_error

HERE = Path(__file__).parent
LOGISTIC = f"py:{HERE / 'models' / 'np_logistic.py'}:make"
CNN = f"py:{HERE.parent / 'examples' / 'jax_cnn.py'}:make_model"
FASHION = Path("/usr/share/datasets/fashion-mnist")
LOG_RUN = ["--model", LOGISTIC, "--synthetic-classes", "2", "--synthetic-rows", "6000", "--synthetic-features", "20",
           "--epochs", "2", "--lr", "0.5", "--progress", "off"]
# two curve points (the first and the last snapshot): each is a forward pass over the test rows
CNN_RUN = ["--model", CNN, "--input-shape", "1,12,12", "--epochs", "1", "--lr", "0.1", "--progress", "off",
           "--curve-points", "2"]
IMAGES = 5000
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="JAX is not installed (pip install -e '.[jax]')")


def synthetic_test_rows(rows: int, features: int, classes: int):
    """The test rows a synthetic run evaluates on, regenerated without MPI."""
    spec = DataSpec(source="synthetic", synthetic_rows=rows, synthetic_features=features, synthetic_classes=classes)
    info = describe(spec)
    test = load_test(spec, info)
    return test.X, np.asarray(info.label_values)[test.y]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The example's synthetic image problem (10 classes of 3x3 patterns in noisy 12x12 images) as an .npz."""
    pytest.importorskip("jax", reason="JAX is not installed (pip install -e '.[jax]')")
    spec = importlib.util.spec_from_file_location("jax_cnn_example", HERE.parent / "examples" / "jax_cnn.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    X, y = example.synthetic_images(IMAGES)
    path = tmp_path_factory.mktemp("images") / "shapes.npz"
    np.savez(path, X=X, y=y)
    return path, X[-IMAGES // 10:], y[-IMAGES // 10:]


@pytest.mark.parametrize("sync", ["bsp", "asp", "esp", "psp"])
def test_numpy_gradient_model_trains_under_every_sync_model(sync, tmp_path):
    proc, s = run_train(4, *LOG_RUN, "--sync", sync, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["model"] == LOGISTIC and s["sync"] == sync
    assert s["deltas_applied"] > 0 and s["delta_sum_rel_error"] < 1e-9
    assert s["test_accuracy"] > 0.75, s["test_accuracy"]      # the untrained model is at chance (~0.5)


def test_curve_points_sets_how_many_snapshots_a_py_model_is_evaluated_at(tmp_path):
    from mpikanel.metrics import read_metrics

    for points in (3, 6):
        metrics = tmp_path / f"m{points}.h5"
        proc, _ = run_train(3, *LOG_RUN, "--snapshot-interval", "0.005", "--curve-points", str(points),
                            "--metrics", str(metrics), tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert len(read_metrics(str(metrics))["curve"]["time_s"]) == points


def test_bsp_is_bitwise_reproducible_for_a_seed_with_one_or_two_servers(tmp_path):
    runs = [run_train(n, *LOG_RUN, *extra, tmp_path=tmp_path) for n, extra in
            ((3, []), (3, []), (3, ["--seed", "1"]), (4, ["--servers", "2"]))]
    for proc, _ in runs:
        assert proc.returncode == 0, proc.stderr
    shas = [s["params_sha256"] for _, s in runs]
    assert shas[0] == shas[1]
    assert shas[2] != shas[0]                 # the seed reaches the run (init and data order)
    assert shas[3] == shas[0]                 # 2 workers and two servers: the same run, keys split
    assert runs[3][1]["test_accuracy"] == runs[0][1]["test_accuracy"]


def test_saved_numpy_model_predicts_without_mpi_as_the_run_reported(tmp_path, monkeypatch):
    path = tmp_path / "m.h5"
    proc, s = run_train(3, *LOG_RUN, "--save-model", str(path), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.chdir(tmp_path)                   # the factory is found by the absolute path recorded
    model = load_model(path)
    X, y = synthetic_test_rows(6000, 20, 2)
    assert model.score(X, y) == s["test_accuracy"]
    assert model.predict(X).shape == y.shape


SLOW_IMPORT = '''import json, sys, time
from pathlib import Path
from mpi4py import MPI
sys.path.insert(0, {models!r})
from np_logistic import make
_start = time.time()
time.sleep({sleep})
Path({out!r}, f"import-{{MPI.COMM_WORLD.Get_rank()}}.json").write_text(json.dumps([_start, time.time()]))
'''


def test_every_rank_imports_a_py_model_at_once_not_after_rank_0(tmp_path):
    # a framework's import takes seconds: the other ranks import the file while rank 0 reads the data's shape
    model = tmp_path / "slow_import.py"
    model.write_text(SLOW_IMPORT.format(models=str(HERE / "models"), sleep=3, out=str(tmp_path)))
    proc, _ = run_train(3, *LOG_RUN, "--model", f"py:{model}:make", "--max-steps", "2")
    assert proc.returncode == 0, proc.stderr
    spans = [json.loads((tmp_path / f"import-{r}.json").read_text()) for r in range(3)]
    assert all(start < spans[0][1] for start, _ in spans[1:]), spans    # they overlap rank 0's import


TEARDOWN = '''import atexit, sys
sys.path.insert(0, {models!r})
from np_logistic import make
atexit.register(lambda: print("python's teardown ran", file=sys.stderr, flush=True))
'''


def test_ranks_end_without_pythons_teardown_and_print_everything(tmp_path):
    # the CLI's ranks end at os._exit once MPI is finalized: Python's teardown of numba's modules costs
    # a rank half a second of CPU; an atexit handler of the model's file is the witness
    model = tmp_path / "teardown.py"
    model.write_text(TEARDOWN.format(models=str(HERE / "models")))
    proc, summary = run_train(2, *LOG_RUN, "--model", f"py:{model}:make", "--max-steps", "2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert summary is not None and summary["deltas_applied"] > 0
    assert "python's teardown ran" not in proc.stderr


def test_cli_errors_for_py_models_are_one_line(tmp_path):
    missing = ["--model", "py:nowhere.py:make"]
    cases = [
        (missing, ["no such file nowhere.py"]),
        (["--model", LOGISTIC.replace(":make", ":absent")], ["has no function absent"]),
        (["--model", LOGISTIC.replace(":make", ":broken"), "--synthetic-classes", "2"], ["this factory always fails"]),
        (["--model", LOGISTIC, "--synthetic-classes", "2", "--input-shape", "3,3,3"],
         ["--input-shape 3,3,3 holds 27 values", "100 features"]),
        (["--model", "softmax", "--input-shape", "10,10"], ["--input-shape is for py:"]),
    ]
    for args, needles in cases:
        proc, _ = run_train(2, *args, timeout=120)
        assert_clean_error(proc, *needles)


@needs_jax
def test_jax_cnn_on_two_servers_resumes_bitwise_and_its_saved_model_predicts_as_reported(images, tmp_path):
    # one run for both (a JAX job costs each rank seconds of import and compile): 2 servers, checkpoints
    # and the saved model; then a resume from the last checkpoint before the end ends with the same bits
    ck, path = tmp_path / "ck", tmp_path / "cnn.h5"
    data = ["--data", str(images[0]), "--servers", "2", "--batch-size", "16"]
    proc, full = run_train(4, *CNN_RUN, *data, "--checkpoint-dir", str(ck), "--checkpoint-every", "100steps",
                           "--keep-checkpoints", "10", "--save-model", str(path), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # BSP: the same bits for a seed, whatever the load; 0.39 here (2 workers, batches of 16, 283 steps)
    assert full["test_accuracy"] > 0.3 and full["delta_sum_rel_error"] < 1e-6      # 10 classes: chance is 0.1
    _, X, y = images
    assert load_model(path).score(X, y) == full["test_accuracy"]
    paths = checkpoints(ck)
    assert len(paths) >= 2
    proc, resumed = run_train(4, *CNN_RUN, *data, "--resume", str(paths[-2]), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert resumed["resumed_from"] == str(paths[-2])
    assert resumed["params_sha256"] == full["params_sha256"]
    assert resumed["test_accuracy"] == full["test_accuracy"]


@needs_jax
@pytest.mark.skipif(not (FASHION / "train-images-idx3-ubyte.gz").exists(),
                    reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
@pytest.mark.timeout(600)
def test_jax_cnn_on_fashion_mnist_images(tmp_path):
    # the first 12,000 training and 2,000 test images: the final evaluation (a forward pass over every
    # training and test row) took 13 of the run's 27 s on the whole set
    from mpikanel.data.sources.idx import FashionMnist

    for part, rows in (("train", 12000), ("t10k", 2000)):
        X, y = FashionMnist(str(FASHION), part).read(0, rows)
        np.savez(tmp_path / f"{part}.npz", X=X, y=y)
    proc, s = run_train(3, "--data", str(tmp_path / "train.npz"), "--test-data", str(tmp_path / "t10k.npz"),
                        "--model", CNN, "--input-shape", "1,28,28", "--lr", "0.05", "--max-steps", "60",
                        "--progress", "off", "--curve-points", "2", tmp_path=tmp_path, timeout=580)
    assert proc.returncode == 0, proc.stderr
    assert s["n_classes"] == 10 and (s["n_train"], s["n_test"]) == (12000, 2000)
    assert s["test_accuracy"] > 0.5, s["test_accuracy"]           # 120 steps of 64 images; chance is 0.1


def test_numpy_model_resumes_on_another_worker_count_and_server_count(tmp_path):
    ck = tmp_path / "ck"
    proc, full = run_train(4, *LOG_RUN, "--sync", "ssp", "--checkpoint-dir", str(ck), "--checkpoint-every", "30steps",
                           "--keep-checkpoints", "10", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = checkpoints(ck)[0]
    proc, s = run_train(4, *LOG_RUN, "--sync", "ssp", "--servers", "2", "--resume", str(first), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["reshaped"]["ranks"] == 4 and s["workers"] == 2 and s["model"] == LOGISTIC
    assert s["samples"] + s["reshaped"]["samples_before"] == s["samples_budget"] == full["samples_budget"]
    assert s["delta_sum_rel_error"] < 1e-9 and s["test_accuracy"] > 0.75
