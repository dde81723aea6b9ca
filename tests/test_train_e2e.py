"""End-to-end: `mpiexec -n N python -m mpikanel.train` for each sync model, as subprocesses."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import clean_env, mpiexec, run_train

FASHION = Path("/usr/share/datasets/fashion-mnist")
SMALL = ["--synthetic-rows", "20000", "--epochs", "2"]


def assert_no_lost_work(s):
    assert s["deltas_sent"] == s["deltas_applied"] == sum(w["pushes"] for w in s["per_worker"])
    assert s["delta_sum_rel_error"] < 1e-9


@pytest.mark.parametrize("sync", [["--sync", "bsp"], ["--sync", "asp"], ["--sync", "ssp", "--staleness", "3"]])
def test_sync_models_converge_on_synthetic(sync, tmp_path):
    proc, s = run_train(4, *sync, *SMALL, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["workers"] == 3 and len(s["per_worker"]) == 3
    assert s["test_accuracy"] > 0.80          # the synthetic default is ~88% linearly separable
    assert_no_lost_work(s)
    for w in s["per_worker"]:
        assert w["pushes"] == w["steps"] + 1 and w["steps"] > 0   # every step, then the final DONE
        assert w["compute_s"] > 0 and w["comm_s"] >= 0 and w["wait_s"] >= 0


@pytest.mark.skipif(not FASHION.exists(), reason="apt-get install dataset-fashion-mnist for the real-data test")
@pytest.mark.parametrize("sync", ["bsp", "asp", "ssp"])
def test_sync_models_converge_on_fashion_mnist(sync, tmp_path):
    proc, s = run_train(4, "--data", "fashion-mnist", "--sync", sync, "--epochs", "1", "--lr", "0.05",
                        tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["n_train"] == 60000 and s["n_test"] == 10000
    assert s["test_accuracy"] > 0.75          # softmax regression reaches ~80% in one epoch
    assert_no_lost_work(s)


def test_bsp_is_bitwise_reproducible(tmp_path):
    runs = [run_train(4, "--sync", "bsp", *SMALL, tmp_path=tmp_path)[1] for _ in range(2)]
    # a different worker count changes arrival order and sums; the same seed and ranks must not
    assert runs[0]["params_sha256"] == runs[1]["params_sha256"]


def test_uneven_shards_and_logistic(tmp_path):
    # 10007 rows over 3 workers: shards differ by one row, step counts may differ
    proc, s = run_train(4, "--model", "logistic", "--sync", "ssp", "--staleness", "0",
                        "--synthetic-rows", "10007", "--batch-size", "50", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["n_classes"] == 2 and s["test_accuracy"] > 0.8
    assert_no_lost_work(s)


def test_sixteen_ranks_ssp_finishes(tmp_path):
    proc, s = run_train(16, "--sync", "ssp", "--staleness", "3", "--synthetic-rows", "30000",
                        "--epochs", "1", tmp_path=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert s["workers"] == 15
    assert_no_lost_work(s)


def test_toml_config_and_human_summary(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('sync = "asp"\nsynthetic-rows = 5000\nepochs = 1\n')
    proc = subprocess.run([mpiexec(), "-n", "3", sys.executable, "-m", "mpikanel.train", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=120, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "ASP softmax" in proc.stdout and "test loss" in proc.stdout
    assert proc.stdout.count("mpikanel 0") == 1    # printed by rank 0 only


def test_diverging_run_aborts_naming_the_rank():
    proc, _ = run_train(3, "--lr", "1e30", "--synthetic-rows", "5000", timeout=120)
    assert proc.returncode != 0
    assert "rank" in proc.stderr and "non-finite" in proc.stderr


def test_killed_worker_ends_the_job():
    cmd = [mpiexec(), "-n", "4", sys.executable, "-m", "mpikanel.train", "--quiet",
           "--synthetic-rows", "100000", "--epochs", "50"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), start_new_session=True)
    try:
        victim = _wait_for_child_python(proc.pid, timeout=60)
        time.sleep(3)          # let training start
        os.kill(victim, signal.SIGKILL)
        proc.wait(timeout=30)  # the launcher must tear the job down within seconds
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("job kept running after a rank was killed")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0


def _wait_for_child_python(launcher_pid: int, timeout: float, all_ranks: bool = False):
    """PID of the newest rank process descended from the launcher (or all of them, sorted)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = [line.split(None, 2) for line in
                subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout.splitlines()[1:]]
        family, grew = {launcher_pid}, True
        while grew:
            grew = False
            for pid, ppid, _ in rows:
                if int(ppid) in family and int(pid) not in family:
                    family.add(int(pid))
                    grew = True
        ranks = [int(pid) for pid, _, args in rows
                 if int(pid) in family and "-m mpikanel.train" in args and "mpiexec" not in args]
        if len(ranks) >= 4:
            return sorted(ranks) if all_ranks else max(ranks)
        time.sleep(0.2)
    pytest.fail("ranks did not start")


def test_asp_soak_sixteen_ranks_loses_nothing(tmp_path):
    # 15 workers x 6750 steps = 101250 pushes through one server; every delta must arrive
    proc, s = run_train(16, "--sync", "asp", "--synthetic-rows", "20000", "--synthetic-features", "20",
                        "--batch-size", "8", "--epochs", "45", "--test-fraction", "0.1", "--lr", "0.01",
                        tmp_path=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert s["deltas_sent"] >= 100_000
    assert_no_lost_work(s)
