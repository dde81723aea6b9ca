"""bench sync and its baselines end to end: subprocesses under mpiexec, each bounded by a timeout."""
import json
import subprocess
import sys

import pytest

from launch import clean_env, mpiexec

TINY = ["--synthetic-rows", "8000", "--synthetic-features", "20", "--batch-size", "64", "--epochs", "3",
        "--snapshot-interval", "0.02"]


def _run(cmd, timeout):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hang: {' '.join(cmd)} did not finish in {timeout}s\n{exc.stderr}")


def test_allreduce_baseline_converges_and_writes_metrics(tmp_path):
    metrics, summary = tmp_path / "ar.h5", tmp_path / "ar.json"
    proc = _run([mpiexec(), "-n", "3", sys.executable, "-m", "mpikanel.baselines.allreduce_sgd", *TINY,
                 "--slowdown", "1:2", "--metrics", str(metrics), "--summary-json", str(summary), "--quiet"], 120)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(summary.read_text())
    assert s["sync"] == "allreduce" and s["workers"] == 3 and s["test_accuracy"] > 0.8
    from mpikanel.metrics import read_metrics
    m = read_metrics(metrics)
    assert m["attrs"]["sync"] == "allreduce" and len(m["curve"]["time_s"]) >= 2
    assert m["curve"]["test_loss"][-1] < m["curve"]["test_loss"][0]
    by_rank = {w["rank"]: w for w in m["workers"]}
    assert sorted(by_rank) == [1, 2, 3] and by_rank[1]["slowdown"] == 2.0 and by_rank[1]["injected_s"] > 0
    assert all(by_rank[r]["injected_s"] == 0 for r in (2, 3))


def test_bench_sync_straggler_writes_results_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    proc = _run([sys.executable, "-m", "mpikanel.bench", "sync", "--scenario", "straggler", "--models", "bsp",
                 "asp", "--lrs", "0.1", "--ranks", "3", "--quick", "--timeout", "60", "--out", str(out)], 150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (out / "results.md").read_text()
    assert "### straggler" in md and "| bsp | 0.1 |" in md and "| asp | 0.1 |" in md
    res = json.loads((out / "results.json").read_text())
    assert res["ranks"] == 3 and res["scenarios"] == {"straggler": {"slowdown": "1:4"}}
    assert {r["model"] for r in res["runs"]} == {"bsp", "asp"} and all(r["ok"] for r in res["runs"])
    assert res["tables"]["straggler"]["target_loss"] > 0 and res["versions"]["mpi4py"]
    for name in ("straggler-loss.png", "straggler-timeline.png"):
        assert (out / name).stat().st_size > 1000
