"""Bad input: a one-line error naming the problem, exit code 2 on every rank, no traceback, no hang."""
import subprocess
import sys

import numpy as np
import pytest

from launch import clean_env, mpiexec, our_stderr, run_train


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
     ["fewer than the 3 workers"], 4),
    ("bad esp option", lambda d: ["--sync", "esp", "--esp-rho", "0"], ["--esp-rho"]),
    ("bad value", lambda d: ["--lr", "-1"], ["--lr"]),
], ids=lambda c: c[0])
def test_bad_input(case, files):
    _, args, needles, *ranks = case
    proc, _ = run_train(*ranks or [3], *args(files), timeout=120)     # 2 workers: one rank prints for all
    assert_clean_error(proc, *needles)


def test_unknown_flag_value_prints_usage_once():
    proc, _ = run_train(3, "--sync", "nope", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("invalid choice") == 1


def test_a_mistyped_flag_is_one_line_naming_the_nearest_flag():
    proc, _ = run_train(3, "--epcohs", "2", timeout=60)
    assert proc.returncode == 2
    assert our_stderr(proc.stderr).strip() == \
        "python -m mpikanel.train: error: unknown flag --epcohs; did you mean --epochs?"


@pytest.mark.parametrize("classes", [1, 2])
def test_a_model_too_large_for_memory_names_its_size_and_cause(classes, tmp_path):
    # a feature index of 10^11 makes a 10^11-parameter model: refused before anything is allocated,
    # also when the data has one class (which would otherwise be the error shown)
    huge = tmp_path / "huge.svm"
    huge.write_text(f"1 100000000000:1 3:1\n{classes - 1} 2:1\n")
    proc, _ = run_train(3, "--data", str(huge), "--test-fraction", "0", timeout=60)
    assert_clean_error(proc, "does not fit in memory", "200,000,000,002 parameters",
                       f"feature index 100000000000 in {huge} line 1")


def test_one_rank_is_refused():
    proc = subprocess.run([sys.executable, "-m", "mpikanel.train", "--quiet"], capture_output=True,
                          text=True, timeout=120, env=clean_env())
    assert_clean_error(proc, "at least 2 MPI ranks")


def test_help():
    proc = subprocess.run([sys.executable, "-m", "mpikanel.train", "--help"], capture_output=True,
                          text=True, timeout=60, env=clean_env())
    assert proc.returncode == 0
    for group in ("data:", "model:", "sync:", "budget:", "heterogeneity:", "checkpoints:", "output"):
        assert f"\n{group}" in proc.stdout
    for flag in ("--sync", "--staleness", "--model", "--data", "--epochs", "--lr", "--batch-size",
                 "--l2", "--seed", "--summary-json", "--quiet", "--config"):
        assert flag in proc.stdout
