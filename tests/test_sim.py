"""The engine's invariants without MPI: the real server and worker cores on the simulator's clock."""
import numpy as np
import pytest

from mpikanel.config import make_config
from mpikanel.errors import InputError
from mpikanel.sim.__main__ import main as sim_main
from mpikanel.sim.run import SimOptions, simulate

SMALL = dict(synthetic_rows=6000, epochs=2, quiet=True, progress="off", snapshot_interval=0.01)
STEP = 1e-3           # a fixed modeled step time: no measurement, fully deterministic


def run(workers: int = 4, **overrides) -> dict:
    """One simulated run on the small problem."""
    return simulate(make_config({**SMALL, **overrides}), SimOptions(workers, step_time=STEP))


@pytest.mark.parametrize("sync", ["bsp", "asp", "ssp", "esp", "psp"])
def test_no_delta_lost_and_the_shared_budget_is_exact(sync):
    s = run(sync=sync, slowdown="1:4")
    assert s["deltas_sent"] == s["deltas_applied"]
    assert s["delta_sum_rel_error"] < 1e-9
    assert s["samples"] == s["samples_budget"] == 2 * 5400       # 6000 rows less the 10% test tail
    assert s["test_accuracy"] > 0.75


def test_fast_workers_do_more_of_the_shared_budget_than_the_straggler():
    s = run(sync="asp", slowdown="1:4")
    samples = [w["samples"] for w in s["per_worker"]]
    assert samples[0] < 0.5 * min(samples[1:])


def test_per_worker_budget_gives_every_worker_its_own_epochs():
    s = run(sync="asp", slowdown="1:4", budget="per-worker")
    assert [w["samples"] for w in s["per_worker"]] == [2 * 1350] * 4


def test_bsp_is_bitwise_reproducible_and_independent_of_modeled_times():
    a = run(sync="bsp")
    b = run(sync="bsp", slowdown="2:3", link_delay="*:0.002")
    assert a["params_sha256"] == b["params_sha256"]


def test_runs_are_deterministic_for_a_seed():
    a, b = run(sync="esp", slowdown="1:3"), run(sync="esp", slowdown="1:3")
    assert a["params_sha256"] == b["params_sha256"] and a["wall_s"] == b["wall_s"]
    c = run(sync="esp", slowdown="1:3", seed=1)
    assert c["params_sha256"] != a["params_sha256"]


@pytest.mark.parametrize("staleness", [0, 2])
def test_ssp_clock_spread_stays_within_s_plus_one_and_reaches_it(staleness):
    s = run(sync="ssp", staleness=staleness, slowdown="1:4")
    assert s["clock_spread_max"] == staleness + 1


def test_esp_never_skips_more_than_max_skip_in_a_row():
    s = run(sync="esp", esp_max_skip=3, slowdown="1:4", link_delay="*:0.01")
    runs = [w["skip_run_max"] for w in s["per_worker"]]
    assert max(runs) <= 3 and max(runs) >= 1          # the bound was exercised


def test_psp_plans_rounds_and_waits_less_than_bsp():
    psp, bsp = run(sync="psp", slowdown="1:4"), run(sync="bsp", slowdown="1:4")
    assert psp["psp"]["rounds"] > 0
    assert max(max(k) for k in psp["psp"]["k"]) > 1             # fast workers were planned extra steps
    wait = lambda s: sum(w["wait_s"] for w in s["per_worker"])   # noqa: E731
    assert wait(psp) < wait(bsp)


def test_psp_is_bsp_like_on_a_homogeneous_cluster():
    # on real ranks scheduling noise on 2 cores moves the plan; on the virtual clock equal workers
    # are planned one step each, every round
    s = run(sync="psp")
    assert s["psp"]["rounds"] > 10
    assert {k for ks in s["psp"]["k"] for k in ks} == {1}


def test_psp_idle_wait_ablation_trains_no_steps_while_pending():
    s = run(sync="psp", slowdown="1:4", psp_wait="idle")
    assert all(w["steps_while_pending"] == 0 for w in s["per_worker"])
    t = run(sync="psp", slowdown="1:4")
    assert sum(w["steps_while_pending"] for w in t["per_worker"]) > 0


def test_time_budget_ends_the_run_and_keeps_unsent_work():
    s = run(sync="esp", epochs=50, time_budget=0.3)
    assert s["samples"] < 50 * 5400 and 0.3 <= s["wall_s"] < 0.5
    assert s["delta_sum_rel_error"] < 1e-9


def test_server_delay_congests_the_server():
    quiet, busy = run(sync="asp"), run(sync="asp", server_delay="0.002")
    assert busy["sim"]["queue_wait_s"] > 10 * max(quiet["sim"]["queue_wait_s"], 1e-6)
    assert busy["wall_s"] > quiet["wall_s"]


def test_many_workers_share_reply_snapshots_and_finish():
    s = simulate(make_config({**SMALL, "synthetic_rows": 20000, "epochs": 1, "sync": "asp"}),
                 SimOptions(256, step_time=STEP))
    assert s["workers"] == 256 and s["samples"] == s["samples_budget"]


def test_cli_writes_the_same_summary_and_metrics_as_train(tmp_path):
    from mpikanel.metrics import read_metrics

    out, metrics = tmp_path / "s.json", tmp_path / "m.h5"
    assert sim_main(["--workers", "3", "--synthetic-rows", "3000", "--epochs", "1", "--quiet", "--step-time",
                     "0.001", "--val-fraction", "0.1", "--summary-json", str(out), "--metrics", str(metrics)]) == 0
    m = read_metrics(metrics)
    assert m["summary"]["workers"] == 3 and "val_loss" in m["curve"] and len(m["workers"]) == 3
    assert m["summary"]["versions"]["mpi"].startswith("simulator")
    assert m["summary"]["threads"]["requested"] == 1 and m["summary"]["threads"]["numba"] == 1


def test_cli_rejects_checkpoints_and_bad_models(capsys):
    assert sim_main(["--workers", "2", "--checkpoint-dir", "x", "--quiet"]) == 2
    assert "checkpoints are off" in capsys.readouterr().err
    assert sim_main(["--workers", "2", "--sim-bandwidth", "0", "--quiet"]) == 2
    with pytest.raises(InputError):
        simulate(make_config(SMALL), SimOptions(0, step_time=STEP))


def test_psp_follows_a_worker_that_slows_down_mid_run():
    # worker 2 turns 4x slower at 30% of its steps: the plan then gives it the fewest steps
    k = np.array(run(sync="psp", slowdown="2:1->4@30%", epochs=6)["psp"]["k"])
    n = len(k)
    assert (k[2:n // 5].max(axis=1) == 1).mean() >= 0.9          # before: everyone alike
    late = k[n // 2:n - n // 5]
    assert len(late) >= 5 and (late[:, 1] < late[:, 0]).mean() >= 0.85


def test_psp_follows_a_straggler_that_recovers():
    # worker 2 starts 4x slow and recovers early: within a few rounds everyone is planned alike
    k = np.array(run(sync="psp", slowdown="2:4->1@8%", epochs=6)["psp"]["k"])
    n = len(k)
    assert (k[:8, 1] < k[:8, 0]).all()
    assert (k[n // 4:].max(axis=1) == 1).mean() >= 0.9


@pytest.mark.parametrize("slowdown", ["1:4", "lognormal:0.5"])
@pytest.mark.parametrize("wait", ["train", "idle"])
def test_psp_predicts_every_arrival_when_step_times_are_fixed(slowdown, wait):
    # modeled step times are exact, so every arrival is predictable: fast workers that trained
    # while their push waited push early, and the prediction must know by how much
    psp = run(sync="psp", slowdown=slowdown, psp_wait=wait, epochs=4)["psp"]
    assert psp["rounds"] > 20 and max(max(k) for k in psp["k"]) > 1
    assert psp["median_relative_error"] < 0.01 and psp["fallback_share"] <= 0.05
    # the misses left: a pass's short last minibatch (a short step) and the budget's last rounds
    predicted, actual = np.array(psp["predicted_s"]), np.array(psp["actual_s"])
    error = np.abs(actual - predicted) / predicted.max(axis=1, keepdims=True)
    assert (error[actual >= 0] < 0.02).mean() >= 0.5


def test_a_partial_minibatch_steps_in_proportion_to_its_rows():
    from mpikanel.engine.worker_core import StepPlan
    plan = StepPlan(1, 64, 1.0, 0.0, 2)
    assert plan.rate_for(64) == 1.0 and plan.rate_for(3) == pytest.approx(3 / 64)


def test_the_budgets_last_rows_do_not_throw_the_model_off_at_the_end():
    # the budget ends on remainders of a few rows per worker; at the full rate those steps were a
    # full-size step on a few samples each and the final loss jumped above the run's minimum
    s = simulate(make_config(dict(sync="bsp", synthetic_rows=30000, synthetic_features=200, batch_size=512, epochs=6,
                                  lr=1.0, val_fraction=0.1, quiet=True, progress="off", snapshot_interval=0.005)),
                 SimOptions(4, step_time=2e-3))
    v = np.asarray(s["curve"]["val_loss"])
    assert v[-1] <= 1.005 * v[-6:].min()


def test_several_servers_divide_the_servers_bytes_and_keep_bsp_bitwise():
    # a server-bound case: many workers, a 10k-parameter model, a slow modeled server
    from mpikanel.sim.models import ServerModel
    opts = SimOptions(64, step_time=STEP, server=ServerModel(bandwidth=2e8))
    cfg = {**SMALL, "synthetic_rows": 20000, "synthetic_features": 1000, "epochs": 1}
    one, four = (simulate(make_config({**cfg, "servers": k}), opts) for k in (1, 4))
    assert one["params_sha256"] == four["params_sha256"] and four["servers"] == 4
    assert four["samples"] == four["samples_budget"] and four["delta_sum_rel_error"] < 1e-9
    # each server handles a quarter of the bytes: it is busy well under half as long, and the run ends sooner
    assert four["sim"]["server_busy_s"] < 0.5 * one["sim"]["server_busy_s"]
    assert four["wall_s"] < one["wall_s"]
    with pytest.raises(InputError, match="every server must own at least one"):
        simulate(make_config({**SMALL, "servers": 10**6}), SimOptions(2, step_time=STEP))


@pytest.mark.parametrize("sync", ["bsp", "asp"])
def test_sparse_frames_move_fewer_bytes_and_bsp_stays_bitwise(sync):
    cfg = {"model": "logistic", "data": "synthetic-sparse", "synthetic_features": 50000, "synthetic_rows": 8000,
           "epochs": 1, "lr": 0.1, "l2": 0.0, "sync": sync, "quiet": True, "progress": "off"}
    opts = SimOptions(16, step_time=STEP)
    dense, sparse = (simulate(make_config({**cfg, "push": push}), opts) for push in ("dense", "auto"))
    assert dense["push"] == "dense" and sparse["push"] == "auto"
    assert sparse["bytes_per_push"] < dense["bytes_per_push"] / 10
    assert sparse["bytes_received"] < dense["bytes_received"] / 2
    assert sparse["delta_sum_rel_error"] < 1e-9 and sparse["samples"] == sparse["samples_budget"]
    if sync == "bsp":
        assert sparse["params_sha256"] == dense["params_sha256"]


def test_esp_holds_back_pushes_while_the_server_is_congested():
    # 8 workers, steps of 1 ms and a server that takes 4 ms a push: ESP weighs each push against what
    # it takes from the server and skips; the ablation without the rule pushes whenever it can
    congested = dict(workers=8, sync="esp", server_delay="0.004", synthetic_rows=20000, epochs=1)
    esp, noeff = run(**congested), run(**congested, esp_efficiency="off")
    pushes = lambda s: sum(w["pushes"] for w in s["per_worker"])     # noqa: E731
    assert pushes(esp) < 0.85 * pushes(noeff)
    assert esp["wall_s"] < 0.85 * noeff["wall_s"]                    # the server's queue was the bottleneck
    assert abs(esp["test_loss"] - noeff["test_loss"]) < 0.01 * noeff["test_loss"]
    assert esp["delta_sum_rel_error"] < 1e-9 and esp["samples"] == esp["samples_budget"]
    # at a server 40x quicker the same rule skips far less
    quick = run(**{**congested, "server_delay": "0.0001"})
    assert pushes(quick) > 1.15 * pushes(esp)
