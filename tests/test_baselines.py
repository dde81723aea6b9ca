"""Allreduce and local SGD baselines: budget arithmetic, CPU-time straggler, and end-to-end runs under mpiexec."""
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from launch import clean_env, mpiexec, our_stderr
from mpikanel.baselines import common
from mpikanel.config import TrainConfig
from mpikanel.hetero import HeteroSpec, Injector
from mpikanel.metrics import read_metrics
from mpikanel.worker_loop import Pacer, StepPlan

TINY = ["--synthetic-rows", "8000", "--synthetic-features", "20", "--batch-size", "64", "--epochs", "3",
        "--snapshot-interval", "0.02", "--val-fraction", "0.1"]
N_ROWS = 7200          # 8000 rows - 10% test
N_VAL = 720


def test_steps_for_samples_counts_the_short_last_batch_of_each_pass():
    assert common.steps_for_samples(100, 30, 100) == 4          # 30 30 30 10
    assert common.steps_for_samples(100, 30, 230) == 9          # two passes (8 steps) + 30
    assert common.steps_for_samples(100, 30, 231) == 10
    assert common.steps_for_samples(100, 30, 0) == 0


def test_shared_budget_is_an_equal_share_and_per_worker_is_whole_passes():
    shared = TrainConfig(epochs=3, batch_size=30)
    assert common.budget_steps(shared, 1000, 4, 250) == common.steps_for_samples(250, 30, 750)
    assert common.budget_steps(TrainConfig(epochs=3, batch_size=30, budget="per-worker"), 1000, 4, 250) == 27
    assert common.budget_steps(TrainConfig(epochs=3, batch_size=30, max_steps=5), 1000, 4, 250) == 5


def test_step_time_ratio_is_relative_to_the_fastest_worker():
    workers = [{"compute_s": 1.0, "injected_s": 3.0, "steps": 10}, {"compute_s": 1.0, "injected_s": 0.0, "steps": 10},
               {"compute_s": 2.0, "injected_s": 0.0, "steps": 10}]
    common.add_step_time_rel(workers)
    assert [w["step_time_rel"] for w in workers] == [4.0, 1.0, 2.0]


class _FakeShard:
    """A shard whose step either burns CPU or sleeps for a while."""

    def __init__(self, burn: bool) -> None:
        self.burn = burn

    def step(self, local, idx, lr, l2, scratch) -> None:
        if self.burn:
            c0 = time.thread_time()
            while time.thread_time() - c0 < 0.02:
                pass
        else:
            time.sleep(0.05)


def test_straggler_is_slowed_by_cpu_time_not_wall_time():
    plan = StepPlan(1, 1, 0.1, 0.0, 2)
    busy, idle = (Injector(HeteroSpec(slowdown="1:4"), 1, 2) for _ in range(2))
    one_row = np.arange(1)
    common.injected_step(_FakeShard(True), None, one_row, plan, None, Pacer(busy, 1))
    common.injected_step(_FakeShard(False), None, one_row, plan, None, Pacer(idle, 1))
    assert busy.injected_s >= 3 * 0.02 * 0.99        # (4 - 1) x the step's CPU time
    assert idle.injected_s < 0.01                     # a step spent off the CPU is not scaled


def test_a_paced_baseline_step_sleeps_the_rest_of_its_modeled_step_scaled_by_the_slowdown(monkeypatch):
    import mpikanel.worker_loop as loop

    slept = []
    monkeypatch.setattr(loop, "sleep_for", slept.append)
    plan = StepPlan(1, 64, 0.1, 0.0, 2)
    pacer = Pacer(Injector(HeteroSpec(slowdown="1:3"), 1, 2), 64, step_time=0.01)
    compute, sleep, injected = common.injected_step(_FakeShard(False), None, np.arange(64), plan, None, pacer)
    # the fake step sleeps 0.05 s off the CPU: the modeled 3 x 0.01 s is shorter, so nothing is slept
    assert compute >= 0.05 and sleep == 0.0 and pacer.missed == 1
    monkeypatch.setattr(_FakeShard, "step", lambda *args: None)
    compute, sleep, injected = common.injected_step(_FakeShard(False), None, np.arange(32), plan, None, pacer)
    # half a batch: modeled 0.5 x 0.01 x 3 s, of it 0.01 s injected by the slowdown; the rest slept
    assert slept[-1] == sleep == pytest.approx(0.015 - compute) and injected == pytest.approx(0.01)
    assert pacer.paced_s == pytest.approx(0.045) and pacer.missed == 1


def test_a_paced_baseline_takes_the_parameter_server_workers_pacer():
    import mpikanel.worker_loop as loop

    assert common.Pacer is loop.Pacer          # one implementation of --step-time for every MPI driver


def _run(module, n, args, tmp_path, name):
    metrics, summary = tmp_path / f"{name}.h5", tmp_path / f"{name}.json"
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", module, *args, "--metrics", str(metrics),
           "--summary-json", str(summary), "--quiet"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=clean_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hang: {' '.join(cmd)} did not finish in 180 s\n{exc.stderr}")
    assert proc.returncode == 0, proc.stderr
    if name.startswith("stderr-"):
        return json.loads(summary.read_text()), read_metrics(metrics), proc.stderr
    return json.loads(summary.read_text()), read_metrics(metrics)


def _check_budget_and_validation(s, m, ranks):
    n_train = N_ROWS - N_VAL
    assert s["n_train"] == n_train and s["n_val"] == N_VAL and s["budget"] == "shared"
    # the shared budget: EPOCHS x training rows in total, an equal share per rank (within one minibatch each)
    assert abs(s["samples"] - 3 * n_train) <= ranks * 64 and s["samples"] >= 3 * n_train
    shares = [w["samples"] for w in s["per_worker"]]
    assert sum(shares) == s["samples"] and max(shares) - min(shares) <= 64
    assert 0 < s["val_loss"] < m["curve"]["val_loss"][0] and "val_accuracy" in m["curve"]
    assert len(m["curve"]["val_loss"]) == len(m["curve"]["time_s"]) >= 2


def test_allreduce_baseline_shares_the_budget_and_records_validation(tmp_path):
    s, m = _run("mpikanel.baselines.allreduce_sgd", 3, [*TINY, "--slowdown", "1:2"], tmp_path, "ar")
    assert s["sync"] == "allreduce" and s["workers"] == 3 and s["test_accuracy"] > 0.8
    _check_budget_and_validation(s, m, 3)
    by_rank = {w["rank"]: w for w in m["workers"]}
    assert sorted(by_rank) == [1, 2, 3] and by_rank[1]["slowdown"] == 2.0 and by_rank[1]["injected_s"] > 0
    assert all(by_rank[r]["injected_s"] == 0 for r in (2, 3))
    assert s["deltas_sent"] == sum(w["steps"] for w in s["per_worker"])          # one Allreduce per step
    assert "load_avg_before" in s and all("step_time_rel" in w for w in s["per_worker"])


def test_allreduce_baseline_trains_a_py_model_and_refuses_a_missing_one_in_one_line(tmp_path):
    model = f"py:{Path(__file__).parent / 'models' / 'np_logistic.py'}:make"
    s, m = _run("mpikanel.baselines.allreduce_sgd", 3, [*TINY, "--synthetic-classes", "2", "--model", model],
                tmp_path, "py")
    assert s["sync"] == "allreduce" and s["model"] == model and s["test_accuracy"] > 0.8
    _check_budget_and_validation(s, m, 3)
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "mpikanel.baselines.allreduce_sgd", *TINY, "--model",
           f"py:{tmp_path / 'nowhere.py'}:make", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env())
    errors = [line for line in our_stderr(proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1 and "nowhere.py" in errors[0], proc.stderr


def test_local_sgd_averages_every_h_steps_on_the_same_budget(tmp_path):
    s, m = _run("mpikanel.baselines.local_sgd", 3, ["--local-steps", "4", *TINY, "--lr", "0.3"], tmp_path, "ls")
    assert s["sync"] == "localsgd-4" and s["local_steps"] == 4 and m["attrs"]["sync"] == "localsgd-4"
    _check_budget_and_validation(s, m, 3)
    steps = s["per_worker"][0]["steps"]
    assert all(w["pushes"] == math.ceil(steps / 4) for w in s["per_worker"])    # an average every 4 steps + the end
    assert s["test_accuracy"] > 0.8
    assert np.all(np.diff(m["curve"]["version"]) > 0)


def test_local_sgd_rejects_a_bad_h(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mpikanel.baselines.local_sgd", "--local-steps", "0"],
                          capture_output=True, text=True, timeout=60, env=clean_env())
    assert proc.returncode == 2 and "--local-steps" in proc.stderr


# --- paced baselines (--step-time): the parameter server workers' pacing ------------------------

#: 6480 training rows over 3 ranks: 2160 rows each, 27 full batches of 80 per pass (every step is modeled whole)
PACED = [*TINY, "--batch-size", "80", "--epochs", "1"]
PACED_STEPS = 27


def _check_paced(s, step_time, factors):
    assert s["step_time"] == step_time and s["pacing_held"] is not None and "pacing_missed_share" in s
    for w in s["per_worker"]:
        assert w["steps"] == PACED_STEPS and {"paced_s", "pacing_s", "pacing_missed", "pacing_missed_share"} <= set(w)
        factor = factors.get(w["rank"], 1.0)
        assert w["paced_s"] == pytest.approx(factor * step_time * PACED_STEPS)
        assert w["compute_s"] + w["injected_s"] + w["pacing_s"] >= w["paced_s"] - 1e-9
        assert w["compute_s"] < 0.5 * w["paced_s"]                  # the CPU mostly sleeps
    assert s["wall_s"] >= PACED_STEPS * step_time * max(factors.values(), default=1.0)


@pytest.mark.alone
def test_paced_allreduce_lasts_its_steps_and_a_paced_straggler_slows_every_rank_3x(tmp_path):
    step = 0.03
    even, _ = _run("mpikanel.baselines.allreduce_sgd", 3, [*PACED, "--step-time", str(step)], tmp_path, "paced")
    _check_paced(even, step, {})
    assert even["pacing_missed_share"] <= 0.25            # a loaded machine may stretch a step now and then
    slow, m = _run("mpikanel.baselines.allreduce_sgd", 3, [*PACED, "--step-time", str(step), "--slowdown", "1:3"],
                   tmp_path, "paced-slow")
    _check_paced(slow, step, {1: 3.0})
    # the slowdown scales the modeled step (2 x 0.03 s injected per step), not the step's CPU time
    by_rank = {w["rank"]: w for w in slow["per_worker"]}
    assert by_rank[1]["injected_s"] == pytest.approx(2 * step * PACED_STEPS, rel=0.05)
    assert by_rank[2]["injected_s"] == by_rank[3]["injected_s"] == 0.0
    assert by_rank[2]["wait_s"] > 0.5 * 2 * step * PACED_STEPS         # the others wait for rank 1 each step
    # every Allreduce waits for the straggler: the run lasts at least its 3x modeled steps, and clearly
    # longer than the unslowed one (load stretches the unslowed run, so no tighter ratio holds everywhere)
    assert slow["wall_s"] >= 0.95 * 3 * step * PACED_STEPS, slow["wall_s"]
    assert slow["wall_s"] >= 1.5 * even["wall_s"], (slow["wall_s"], even["wall_s"])
    assert m["summary"]["step_time"] == step


def test_paced_local_sgd_says_when_its_compute_outlasts_the_step_time(tmp_path):
    s, m, err = _run("mpikanel.baselines.local_sgd", 3, ["--local-steps", "4", *PACED, "--step-time", "1e-7"],
                     tmp_path, "stderr-unheld")
    assert s["sync"] == "localsgd-4" and s["step_time"] == 1e-7
    assert s["pacing_held"] is False and s["pacing_missed_share"] > 0.5
    assert "pacing not held" in err and "--step-time 1e-07" in err
    assert all(w["pacing_missed"] > 0.5 * w["steps"] for w in s["per_worker"])


def test_unpaced_baselines_record_no_pacing(tmp_path):
    s, _ = _run("mpikanel.baselines.allreduce_sgd", 2, [*PACED, "--max-steps", "5"], tmp_path, "unpaced")
    assert s["step_time"] is None and s["pacing_held"] is None and s["pacing_missed_share"] is None
    assert all(w["paced_s"] == 0.0 and w["pacing_s"] == 0.0 for w in s["per_worker"])


def test_the_baselines_help_says_they_are_paced_like_the_workers():
    for module in ("allreduce_sgd", "local_sgd"):
        out = subprocess.run([sys.executable, "-m", f"mpikanel.baselines.{module}", "--help"], capture_output=True,
                             text=True, timeout=60, env=clean_env())
        assert out.returncode == 0 and f"mpikanel.baselines.{module}" in out.stdout
        text = " ".join(out.stdout.split())
        assert "Paced exactly like mpikanel.train's workers" in text and "--step-time" in text
