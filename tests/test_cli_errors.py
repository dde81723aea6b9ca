"""Bad input: a one-line error naming the problem, exit code 2 on every rank, no traceback, no hang."""
import subprocess
import sys

import numpy as np
import pytest

from launch import clean_env, mpiexec, run_train


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr          # one line, printed once (by rank 0)
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def files(tmp_path):
    bad_svm = tmp_path / "bad.svm"
    bad_svm.write_text("1 1:0.5 2:1.0\n0 1:0.25 2:oops\n")
    X = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    nan_X = X.copy()
    nan_X[37, 2] = np.nan
    np.savez(tmp_path / "nan.npz", X=nan_X, y=y)
    np.savez(tmp_path / "ok.npz", X=X, y=y)
    np.savez(tmp_path / "wide.npz", X=np.zeros((10, 5), np.float32), y=np.zeros(10, np.int64))
    np.savez(tmp_path / "tiny.npz", X=X[:2], y=y[:2])
    return tmp_path


@pytest.mark.parametrize("case", [
    ("missing", lambda d: ["--data", str(d / "nope.npz")], ["nope.npz"]),
    ("malformed libsvm", lambda d: ["--data", str(d / "bad.svm")], ["bad.svm", "2"]),
    ("nan features", lambda d: ["--data", str(d / "nan.npz")], ["nan.npz", "37"]),
    ("labels vs model", lambda d: ["--model", "logistic", "--synthetic-classes", "5"], ["logistic", "5"]),
    ("feature mismatch", lambda d: ["--data", str(d / "ok.npz"), "--test-data", str(d / "wide.npz")],
     ["feature-count mismatch"]),
    ("more workers than rows", lambda d: ["--data", str(d / "tiny.npz"), "--test-fraction", "0"],
     ["fewer than the 3 workers"]),
    ("bad esp option", lambda d: ["--sync", "esp", "--esp-rho", "0"], ["--esp-rho"]),
    ("bad value", lambda d: ["--lr", "-1"], ["--lr"]),
], ids=lambda c: c[0])
def test_bad_input(case, files):
    _, args, needles = case
    proc, _ = run_train(4, *args(files), timeout=120)
    assert_clean_error(proc, *needles)


def test_unknown_flag_value_prints_usage_once():
    proc, _ = run_train(3, "--sync", "nope", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("invalid choice") == 1


def test_one_rank_is_refused():
    proc = subprocess.run([sys.executable, "-m", "mpikanel.train", "--quiet"], capture_output=True,
                          text=True, timeout=120, env=clean_env())
    assert_clean_error(proc, "at least 2 MPI ranks")


def test_help():
    proc = subprocess.run([sys.executable, "-m", "mpikanel.train", "--help"], capture_output=True,
                          text=True, timeout=60, env=clean_env())
    assert proc.returncode == 0
    for flag in ("--sync", "--staleness", "--model", "--data", "--epochs", "--lr", "--batch-size",
                 "--l2", "--seed", "--summary-json", "--quiet", "--config"):
        assert flag in proc.stdout
