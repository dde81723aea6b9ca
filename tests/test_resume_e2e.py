"""A resume continues the run that was checkpointed: its settings unless given again, its budget,
one line when nothing is left or the budget given is too small; and the messages around a run."""
import subprocess
import sys

import pytest

from launch import checkpoints, clean_env, mpiexec, our_stderr, run_train
from mpikanel import checkpoint as ck

ROWS = 20000                 # 18000 training rows
RUN = ["--synthetic-rows", str(ROWS), "--sync", "ssp", "--staleness", "2", "--lr", "0.05"]
EPOCHS = 5


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """A 5-epoch SSP run that checkpointed every 100 worker steps, and its summary."""
    d = tmp_path_factory.mktemp("resume")
    proc, summary = run_train(4, *RUN, "--epochs", str(EPOCHS), "--checkpoint-dir", str(d / "ck"),
                              "--checkpoint-every", "100steps", "--keep-checkpoints", "50", tmp_path=d)
    assert proc.returncode == 0, proc.stderr
    return d, summary


def done_samples(path) -> int:
    return int(ck.load(path, worker_arrays=False).server["budget"]["counted"])


def test_a_resume_without_its_flags_continues_the_checkpointed_run(checkpointed, tmp_path):
    d, full = checkpointed
    # beyond the default budget (3 epochs): resuming it with the defaults used to end in a protocol error
    late = [p for p in checkpoints(d / "ck") if not ck.load(p, worker_arrays=False).final
            and done_samples(p) > 3 * 18000]
    assert late, [done_samples(p) for p in checkpoints(d / "ck")]
    proc, s = run_train(4, "--resume", str(late[-1]), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (s["sync"], s["samples"], s["samples_budget"]) == ("ssp", EPOCHS * 18000, EPOCHS * 18000)
    assert s["resumed_from"] == str(late[-1]) and "protocol error" not in proc.stderr
    assert s["test_loss"] < 1.1 * full["test_loss"]           # SSP: timing-dependent, the same band


def test_a_budget_smaller_than_what_was_done_is_one_line_and_exit_2(checkpointed):
    d, _ = checkpointed
    late = checkpoints(d / "ck")[-2]
    proc, _ = run_train(4, "--resume", str(late), "--epochs", "1", timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in our_stderr(proc.stderr).splitlines() if line.strip()]
    assert len(errors) == 1 and f"the checkpoint has done {done_samples(late)} samples, more than this run's " \
        "budget of 18000 (--epochs 1 x 18000 rows)" in errors[0], proc.stderr


def test_a_checkpoint_with_nothing_left_finishes_at_once_with_one_line(checkpointed):
    d, _ = checkpointed
    final = checkpoints(d / "ck")[-1]
    proc = subprocess.run([mpiexec(), "-n", "4", sys.executable, "-m", "mpikanel.train", "--checkpoint-dir",
                           str(d / "ck"), "--resume", "latest"], capture_output=True, text=True, timeout=120,
                          env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (f"mpikanel: {final} is the end of its run ({EPOCHS * 18000} of {EPOCHS * 18000} "
                                   "samples done); nothing left"), proc.stdout + proc.stderr


def test_save_model_says_where_the_model_went(tmp_path):
    model = tmp_path / "m.h5"
    proc = subprocess.run([mpiexec(), "-n", "3", sys.executable, "-m", "mpikanel.train", "--synthetic-rows", "4000",
                           "--epochs", "1", "--progress", "off", "--save-model", str(model)], capture_output=True,
                          text=True, timeout=120, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert f"mpikanel: model saved to {model} (use it with: python -m mpikanel.predict --model {model}" in proc.stdout
    assert model.exists()
