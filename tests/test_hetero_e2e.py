"""Heterogeneity injection end to end: a 4x straggler makes BSP's fast workers wait, not ASP's."""
import pytest

from launch import run_train

STRAGGLER = ["--slowdown", "1:4", "--batch-size", "512", "--synthetic-rows", "30000",
             "--synthetic-features", "800", "--epochs", "2"]


def run(sync, tmp_path):
    proc, s = run_train(4, "--sync", sync, *STRAGGLER, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    return s, by_rank[1], [by_rank[2], by_rank[3]]


def test_straggler_makes_bsp_wait_and_not_asp(tmp_path):
    bsp, slow, fast = run("bsp", tmp_path)
    assert slow["slowdown"] == 4.0 and all(w["slowdown"] == 1.0 for w in fast)
    assert slow["injected_s"] > 0 and all(w["injected_s"] == 0 for w in fast)
    # BSP: the fast workers sit at the barrier for a good part of the straggler's extra time
    for w in fast:
        assert w["wait_s"] > 0.3 * slow["injected_s"], (w, slow)
    bsp_wait = sum(w["wait_s"] for w in fast)
    asp, slow, fast = run("asp", tmp_path)
    # ASP: nobody is held by the policy (what remains is the server handling other pushes)
    assert sum(w["wait_s"] for w in fast) < 0.2 * bsp_wait
    assert asp["scenario"] == "slowdown 1:4"


def test_metrics_file_and_plots(tmp_path):
    metrics = tmp_path / "run.h5"
    proc, s = run_train(3, "--synthetic-rows", "10000", "--epochs", "2", "--metrics", str(metrics),
                        "--target-loss", "5.0", "--snapshot-interval", "0.01", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["time_to_target_s"] is not None and len(s["curve"]["time_s"]) >= 2
    from mpikanel.metrics import read_metrics
    m = read_metrics(metrics)
    assert m["attrs"]["sync"] == "bsp" and list(m["curve"]["test_loss"]) == s["curve"]["test_loss"]
    pytest.importorskip("matplotlib")
    from mpikanel.plot import main as plot_main
    assert plot_main([str(metrics), "-o", str(tmp_path / "loss.png"), "--timeline", str(tmp_path / "tl.svg")]) == 0
    assert (tmp_path / "loss.png").stat().st_size > 1000 and (tmp_path / "tl.svg").stat().st_size > 1000
