"""The trained model out of a run: model files, TrainedModel against the kernels, the predict CLI."""
import subprocess
import sys

import h5py
import numpy as np
import pytest

from mpikanel.errors import InputError
from mpikanel.kernels import get_model
from mpikanel.kernels.base import CSR
from mpikanel.model_io import TrainedModel, load_model, save_model
from mpikanel.predict import main as predict_main

D, C = 7, 4


def random_model(name: str, n_classes: int = C, hidden: int = 5):
    model = get_model(name, hidden=hidden)
    rng = np.random.default_rng(3)
    w = rng.normal(size=model.n_params(D, n_classes))
    return model, w


@pytest.mark.parametrize("name", ["logistic", "softmax", "svm", "lsq", "mlp"])
def test_predictions_match_the_kernels(name):
    # the numpy scores read the parameters in the kernels' layout: same argmax as the numba predict
    n_classes = 2 if name == "logistic" else C
    model, w = random_model(name, n_classes)
    X = np.random.default_rng(4).normal(size=(300, D)).astype(np.float32)
    classes = tuple(range(10, 10 + n_classes))
    tm = TrainedModel(w, name, D, classes, hidden=5)
    kernel = model.predict(w, X, n_classes)
    assert (tm.predict(X) == np.asarray(classes)[kernel]).all()
    csr = CSR.from_dense(X)
    assert (tm.predict(csr) == tm.predict(X)).all()
    assert tm.score(X, np.asarray(classes)[kernel]) == 1.0


@pytest.mark.parametrize("name", ["logistic", "softmax", "mlp"])
def test_probabilities_sum_to_one_and_agree_with_predict(name):
    n_classes = 2 if name == "logistic" else C
    _, w = random_model(name, n_classes)
    tm = TrainedModel(w * 50, name, D, tuple(range(n_classes)), hidden=5)     # large scores: no overflow
    X = np.random.default_rng(5).normal(size=(50, D))
    p = tm.predict_proba(X)
    assert p.shape == (50, n_classes) and np.isfinite(p).all()
    assert np.allclose(p.sum(axis=1), 1.0)
    assert (tm.classes_[p.argmax(axis=1)] == tm.predict(X)).all()


def test_margin_models_have_no_probabilities():
    _, w = random_model("svm")
    tm = TrainedModel(w, "svm", D, tuple(range(C)))
    assert not hasattr(tm, "predict_proba")


def test_save_load_round_trip(tmp_path):
    _, w = random_model("softmax")
    path = save_model(tmp_path / "m.h5", w, {"model": "softmax", "sync": "esp"}, D, ("a", "b", "c", "d"))
    tm = load_model(path)
    assert np.array_equal(tm.params, w) and list(tm.classes_) == ["a", "b", "c", "d"]
    assert tm.config["sync"] == "esp" and tm.n_features_in_ == D
    assert not list(tmp_path.glob(".*tmp*"))                     # the temporary name is gone


def test_bad_inputs_are_clear(tmp_path):
    _, w = random_model("softmax")
    tm = TrainedModel(w, "softmax", D, tuple(range(C)))
    with pytest.raises(InputError, match="features"):
        tm.predict(np.zeros((2, D + 1)))
    with pytest.raises(InputError, match="do not fit"):
        TrainedModel(w[:-1], "softmax", D, tuple(range(C)))
    with pytest.raises(InputError, match="no such model"):
        load_model(tmp_path / "missing.h5")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(InputError, match="corrupted"):
        load_model(tmp_path / "junk.h5")


def test_predict_cli_writes_labels_and_refuses_bad_input(tmp_path, capsys):
    _, w = random_model("softmax")
    save_model(tmp_path / "m.h5", w, {"model": "softmax"}, D, (3, 5, 7, 9))
    X = np.random.default_rng(6).normal(size=(20, D)).astype(np.float32)
    tm = load_model(tmp_path / "m.h5")
    np.savez(tmp_path / "d.npz", X=X, y=tm.predict(X))
    assert predict_main(["--model", str(tmp_path / "m.h5"), "--data", str(tmp_path / "d.npz"),
                         "--out", str(tmp_path / "p.npy")]) == 0
    assert (np.load(tmp_path / "p.npy") == tm.predict(X)).all()
    assert "accuracy 1.0000" in capsys.readouterr().err
    assert predict_main(["--model", str(tmp_path / "d.npz"), "--data", str(tmp_path / "d.npz")]) == 2
    assert "corrupted or truncated model file" in capsys.readouterr().err
    save_model(tmp_path / "s.h5", w, {"model": "svm"}, D, (3, 5, 7, 9))
    assert predict_main(["--model", str(tmp_path / "s.h5"), "--data", str(tmp_path / "d.npz"), "--proba"]) == 2
    assert "no probabilities" in capsys.readouterr().err


def test_predict_cli_predicts_rows_without_labels(tmp_path, capsys):
    _, w = random_model("softmax")
    save_model(tmp_path / "m.h5", w, {"model": "softmax"}, D, (3, 5, 7, 9))
    tm = load_model(tmp_path / "m.h5")
    X = np.random.default_rng(7).normal(size=(6, D)).astype(np.float32)
    np.savez(tmp_path / "x.npz", X=X)                                   # no y at all
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["X"] = X
    rows = [" ".join(f"{j + 1}:{v:.9g}" for j, v in enumerate(x)) for x in X]
    (tmp_path / "x.svm").write_text("".join(f"? {r}\n" for r in rows))  # placeholder labels
    (tmp_path / "half.svm").write_text(f"3 {rows[0]}\n? {rows[1]}\n")
    for name in ("x.npz", "x.h5", "x.svm"):
        out = tmp_path / f"{name}.npy"
        assert predict_main(["--model", str(tmp_path / "m.h5"), "--data", str(tmp_path / name), "--out", str(out)]) == 0
        assert (np.load(out) == tm.predict(X)).all()
        assert "6 rows, no labels (predictions only)" in capsys.readouterr().err
    assert predict_main(["--model", str(tmp_path / "m.h5"), "--data", str(tmp_path / "half.svm"),
                         "--out", str(tmp_path / "half.npy")]) == 0
    assert "1 rows without a label: no accuracy" in capsys.readouterr().err


def test_import_mpikanel_load_model_loads_neither_mpi_nor_numba():
    code = "import sys, mpikanel; mpikanel.load_model; print('mpi4py' in sys.modules, 'numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
