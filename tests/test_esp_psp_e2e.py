"""ESP and PSP end to end under mpiexec: no lost work, the behaviour each model promises, convergence."""
import numpy as np
import pytest

from launch import run_train
from need import needs_fashion
from test_train_e2e import SMALL, assert_no_lost_work

#: round trips, congestion and waits measured: each test runs with no other stage beside it
pytestmark = pytest.mark.alone
HEAVY = ["--batch-size", "512", "--synthetic-rows", "30000", "--synthetic-features", "800", "--epochs", "2"]


# the non-default variants scale deltas down (1/(1+staleness), 1/steps) and converge more slowly
# (README, "Choosing the ESP and PSP defaults"): a lower bar for them
@pytest.mark.parametrize("sync,accuracy", [(["--sync", "esp"], 0.80),
                                           (["--sync", "esp", "--esp-scale", "inverse"], 0.75),
                                           (["--sync", "psp"], 0.80),
                                           (["--sync", "psp", "--psp-aggregate", "normalized"], 0.75)])
def test_converges_like_bsp_and_loses_nothing(sync, accuracy, tmp_path):
    proc, s = run_train(4, *sync, *SMALL, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["test_accuracy"] > accuracy        # BSP reaches ~0.87 on this problem
    assert_no_lost_work(s)
    # the shared budget: the cluster processes exactly EPOCHS x training rows, every worker some
    assert s["samples"] == s["samples_budget"] == 2 * 18000
    assert all(w["samples"] > 0 and w["pushes"] >= 1 for w in s["per_worker"])


@needs_fashion
@pytest.mark.parametrize("sync", ["esp", "psp"])
def test_converges_on_fashion_mnist(sync, tmp_path):
    # lr 0.02: at 0.05 one epoch ends in SGD's noise band, where a late stale push can dip accuracy
    proc, s = run_train(4, "--data", "fashion-mnist", "--sync", sync, "--epochs", "1", "--lr", "0.02",
                        tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["test_accuracy"] > 0.75            # BSP: 0.787 after one epoch at this rate
    assert_no_lost_work(s)


def test_esp_skips_the_pushes_a_narrow_link_makes_dear(tmp_path):
    # worker 1's link moves 1 MB/s: its 64 KB pushes take 64 ms on it, many steps' worth, while a
    # probe (120 bytes) crosses at once; the other workers' pushes cost the cluster next to nothing
    proc, s = run_train(4, "--sync", "esp", "--link-bandwidth", "1:1e6", *HEAVY, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_no_lost_work(s)
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    slow, fast = by_rank[1], [by_rank[2], by_rank[3]]
    assert slow["rtt_mean_s"] >= 0.064                       # what ESP measured: the payload on the link
    assert slow["skips"] > 0.5 * slow["steps"]               # the narrow link is rarely worth using
    assert slow["skips_by_reason"].get("value", 0) > 0
    rate = lambda w: w["skips"] / w["steps"]                 # noqa: E731 - per step: the shared budget
    # the others skip less often, on average (one of them alone may skip for a loaded server)
    assert np.mean([rate(w) for w in fast]) < rate(slow), (fast, slow)
    for w in s["per_worker"]:
        assert w["exchanges_started"] == w["exchanges_completed"] == w["pushes"]
        assert w["rtt_p95_s"] >= w["rtt_mean_s"] * 0.5 > 0


def test_esp_skips_while_the_server_is_congested_and_pushes_when_it_is_not(tmp_path):
    # a server that takes 10 ms a push against steps of a few ms: ESP holds its pushes back until
    # they carry enough to pay for the server's time; at the same server without the delay it pushes
    share = {}
    for delay in ("0.01", None):
        extra = ("--server-delay", delay) if delay else ()
        proc, s = run_train(4, "--sync", "esp", *extra, *HEAVY, tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert_no_lost_work(s)
        share[delay] = sum(w["skips"] for w in s["per_worker"]) / sum(w["steps"] for w in s["per_worker"])
    assert share["0.01"] > 0.5 and share["0.01"] > 2 * share[None], share


def test_esp_round_trips_see_the_link_and_every_merge_is_counted(tmp_path):
    proc, s = run_train(4, "--sync", "esp", "--link-delay", "1:0.05", *HEAVY, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    assert by_rank[1]["rtt_mean_s"] >= 0.05            # the measure includes the injected 50 ms link
    for w in s["per_worker"]:
        # each reply was either taken at the end of the step it landed in or blocked for
        assert w["merges_after_step"] + w["merges_blocked"] == w["exchanges_completed"] == w["pushes"]


def test_esp_skip_bound_holds(tmp_path):
    # tiny steps, slow exchanges: ESP skips all it may, then forces a sync (a 50 ms link outlasts
    # 3 tiny steps even on a loaded machine)
    proc, s = run_train(3, "--sync", "esp", "--esp-max-skip", "3", "--link-delay", "*:0.05", *SMALL[:2],
                        "--epochs", "1", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for w in s["per_worker"]:
        assert w["forced_syncs"] > 0
        assert w["skips"] <= 3 * (w["pushes"] + 1)


def test_psp_gives_fast_workers_more_steps_under_a_straggler(tmp_path):
    # long steps (2000 features) and an 8x straggler: it must stand out of the scheduling noise of a
    # loaded 2-core machine (uneven CPU shares of 2-3x between the ranks)
    proc, s = run_train(4, "--sync", "psp", "--slowdown", "1:8", "--batch-size", "512", "--synthetic-rows",
                        "30000", "--synthetic-features", "2000", "--epochs", "2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_no_lost_work(s)
    k = np.array(s["psp"]["k"])
    planned = k[1:]                               # round 0 plans before anything is measured
    assert planned[:, 1:].mean() > 2 * planned[:, 0].mean()
    assert s["psp"]["rounds"] > 3
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    slow, fast = by_rank[1], [by_rank[2], by_rank[3]]
    for w in fast:
        # while a round waits for the straggler the fast workers keep training (folded into the
        # next delta), and under the shared budget they take on more of the samples
        assert w["steps_while_pending"] > 0, w
        assert w["samples"] > slow["samples"], (w, slow)
    assert s["samples"] == s["samples_budget"]


@pytest.mark.parametrize("sync", ["esp"])      # PSP's plan at many workers: tests/test_sim.py (CI time)
def test_sixteen_ranks(sync, tmp_path):
    proc, s = run_train(16, "--sync", sync, "--synthetic-rows", "30000", "--epochs", "1",
                        tmp_path=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert s["workers"] == 15
    assert_no_lost_work(s)
