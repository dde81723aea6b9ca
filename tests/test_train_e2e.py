"""End-to-end: `mpiexec -n N python -m mpikanel.train` for each sync model, as subprocesses."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from launch import PACE, checkpoints, clean_env, mpiexec, paced_training_left_s, run_train
from need import needs_fashion

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
    assert s["samples"] == s["samples_budget"] == 2 * 18000     # the shared budget, exactly
    for w in s["per_worker"]:
        assert w["pushes"] == w["steps"] + 1 and w["steps"] > 0   # every step, then the final DONE
        # a blocking worker waits for every reply: some of that is the exchange itself (comm_s),
        # and its compute, exchange and policy-held time all lie inside the run's wall time (the
        # second: barrier-exit skew between ranks)
        assert w["compute_s"] > 0 and w["comm_s"] > 0
        assert w["compute_s"] + w["comm_s"] + w["wait_s"] <= 1.05 * s["wall_s"] + 1.0, (w, s["wall_s"])
    if sync[1] == "bsp":
        # a barrier every step: whoever arrives first in a round is held by the policy
        assert sum(w["wait_s"] for w in s["per_worker"]) > 0


@needs_fashion
# one model on real data (each model trains on synthetic data above; BSP and the MLP train on
# Fashion-MNIST in the kernel tests): CI time
@pytest.mark.parametrize("sync", ["asp"])
def test_sync_models_converge_on_fashion_mnist(sync, tmp_path):
    proc, s = run_train(4, "--data", "fashion-mnist", "--sync", sync, "--epochs", "1", "--lr", "0.05",
                        tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["n_train"] == 60000 and s["n_test"] == 10000
    assert s["test_accuracy"] > 0.75          # softmax regression reaches ~80% in one epoch
    assert_no_lost_work(s)


def test_uneven_shards_and_logistic(tmp_path):
    # 10007 rows over 3 workers: shards differ by one row, step counts may differ
    proc, s = run_train(4, "--model", "logistic", "--sync", "ssp", "--staleness", "0",
                        "--synthetic-rows", "10007", "--batch-size", "50", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["n_classes"] == 2 and s["test_accuracy"] > 0.8
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


def test_killed_worker_ends_the_job(tmp_path):
    ck = tmp_path / "ck"
    # paced: >= 28 s of training on 3 workers whatever the CPU, so the kill lands while it trains
    epochs = 6
    cmd = [mpiexec(), "-n", "4", sys.executable, "-m", "mpikanel.train", "--quiet", "--synthetic-rows", "100000",
           "--epochs", str(epochs), *PACE, "--checkpoint-dir", str(ck), "--checkpoint-every", "0.5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), start_new_session=True)
    try:
        victim = rank_pids(proc.pid, 4, timeout=60)[2]    # a worker, by its MPI rank
        # kill mid-training (a checkpoint was written), not during MPI start-up: a rank lost before
        # MPI_Init completes is the launcher's start-up failure, not what this test is about
        deadline = time.time() + 240
        while not checkpoints(ck) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None and checkpoints(ck), "training never started"
        left = paced_training_left_s(ck, epochs * 90000, 3)
        assert left >= 3.0, f"only {left:.1f} s of training left: the kill could land after it"
        kill_rank(victim, 2)
        t0 = time.time()
        proc.wait(timeout=10)  # the launcher must tear the job down within seconds (README: about one)
        sys.stderr.write(f"[killed worker] job ended {time.time() - t0:.2f} s after the kill\n")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("job kept running 10 s after a rank was killed")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (the launcher and its proxies spawn the ranks)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def mpi_rank_of(pid: int) -> int | None:
    """The MPI rank a process was started as, from its own environment (None: not an MPI rank)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    for key in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK", b"PMIX_RANK"):
        if key in env:
            return int(env[key])
    return None


def rank_pids(launcher_pid: int, n: int, timeout: float) -> dict[int, int]:
    """{MPI rank: pid} of the n `mpikanel.train` ranks under the launcher, each rank read from the
    process's environment (PMI_RANK from MPICH's Hydra; Open MPI's names too), not guessed from pids."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        candidates = {}
        for pid in _descendants(launcher_pid):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"mpikanel.train" in args and not any(a.endswith(b"mpiexec") for a in args[:1]):
                rank = mpi_rank_of(pid)
                if rank is not None:
                    candidates[pid] = rank
        # a rank's forked child (a library running a command) shows the rank's command line and
        # environment until it execs, then ends: not the rank
        found = {rank: pid for pid, rank in candidates.items() if _parent(pid) not in candidates}
        if sorted(found) == list(range(n)):
            return found
        time.sleep(0.2)
    pytest.fail(f"the {n} ranks did not start in {timeout}s")


def kill_rank(pid: int, rank: int) -> None:
    """SIGKILL the process, having checked once more that it is MPI rank `rank`."""
    assert mpi_rank_of(pid) == rank, f"pid {pid} is not rank {rank} (any more)"
    os.kill(pid, signal.SIGKILL)


def test_asp_soak_sixteen_ranks_loses_nothing(tmp_path):
    # 15 workers x 300 steps = 4500 pushes through one server; every delta must arrive
    proc, s = run_train(16, "--sync", "asp", "--synthetic-rows", "13334", "--synthetic-features", "20",
                        "--batch-size", "8", "--epochs", "3", "--test-fraction", "0.1", "--lr", "0.01",
                        tmp_path=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert s["deltas_sent"] >= 4_000
    assert_no_lost_work(s)


def test_save_model_and_export_checkpoint_give_the_runs_test_accuracy(tmp_path):
    from mpikanel import load_model
    from mpikanel.config import make_config
    from mpikanel.data import describe, load_test
    from mpikanel.predict import main as predict_main
    from mpikanel.data import data_spec

    ck = tmp_path / "ck"
    proc, s = run_train(3, *SMALL, "--save-model", str(tmp_path / "model.h5"), "--checkpoint-dir", str(ck),
                        tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["model_file"] == str(tmp_path / "model.h5")
    spec = data_spec(make_config(synthetic_rows=20000))
    info = describe(spec)
    test = load_test(spec, info)
    labels = np.asarray(info.label_values)[test.y]
    model = load_model(tmp_path / "model.h5")
    assert model.score(test.X, labels) == pytest.approx(s["test_accuracy"], abs=1e-3)
    # the final checkpoint holds the same parameters: exported, it is the same model
    final = checkpoints(ck)[-1]
    assert predict_main(["--export", str(final), "--model", str(tmp_path / "export.h5")]) == 0
    assert np.array_equal(load_model(tmp_path / "export.h5").params, model.params)


def test_save_model_into_a_missing_directory_is_refused_before_training(tmp_path):
    proc, _ = run_train(2, *SMALL, "--save-model", str(tmp_path / "nowhere" / "m.h5"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_logistic_learns_the_synthetic_sparse_problem(tmp_path):
    # CSR all the way from the generator to the kernels. The classes are balanced (chance: 0.5,
    # loss log 2 = 0.693); the Bayes rule is ~0.82, out of reach of 20k rows over 100k features
    # (measured: 0.709, loss 0.584)
    proc, s = run_train(3, "--data", "synthetic-sparse", "--synthetic-features", "100000",
                        "--synthetic-rows", "20000", "--model", "logistic", "--lr", "1", "--epochs", "3",
                        "--l2", "0", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["test_accuracy"] > 0.65 and s["test_loss"] < 0.65
    assert_no_lost_work(s)
