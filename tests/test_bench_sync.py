"""bench sync: the analysis as pure functions on fabricated records, and one tiny end-to-end run."""
import argparse
import json
import subprocess
import sys

import pytest

from launch import clean_env
from mpikanel.bench import sync as bench
from mpikanel.errors import InputError


def _rec(model="bsp", lr=0.1, val=0.5, ok=True, seed=0, curve=None, **extra):
    r = {"scenario": "s", "model": model, "lr": lr, "seed": seed, "ok": ok, "val_loss": val if ok else None}
    if curve is not None:
        r["_val_curve"] = curve
    return {**r, **extra}


# ---------------------------------------------------------------- rate choice on validation

def test_rate_is_chosen_on_final_validation_loss_not_test():
    grid = [_rec(lr=0.1, val=0.50, test_loss=0.30), _rec(lr=0.2, val=0.40, test_loss=0.60),
            _rec(lr=0.5, val=0.45, test_loss=0.20), _rec(lr=1.0, val=0.47, test_loss=0.10)]
    assert bench.choose_rate(grid) == (0.2, None)


def test_failed_runs_never_win_and_all_failed_gives_no_rate():
    grid = [_rec(lr=0.1, val=0.5), _rec(lr=0.2, val=0.45), _rec(lr=0.5, ok=False), _rec(lr=1.0, val=float("nan"))]
    assert bench.choose_rate(grid) == (0.2, None)
    assert bench.choose_rate([_rec(lr=0.1, ok=False), _rec(lr=0.2, ok=False)]) == (None, None)


@pytest.mark.parametrize("best, edge", [(0.1, "lowest"), (1.0, "highest")])
def test_best_rate_at_an_edge_of_the_grid_warns(best, edge):
    grid = [_rec(lr=lr, val=0.3 if lr == best else 0.6) for lr in (0.1, 0.2, 0.5, 1.0)]
    lr, warning = bench.choose_rate(grid)
    assert lr == best and warning and edge in warning


def test_next_rate_steps_one_grid_step_beyond_the_edge_the_best_rate_sits_on():
    assert bench.next_rate([0.4, 1.0, 2.0, 4.0], 4.0) == 8.0
    assert bench.next_rate([0.4, 1.0, 2.0, 4.0], 0.4) == 0.16          # that end's ratio, 2.5x
    assert bench.next_rate([1.0, 1.5, 3.0], 3.0) == 6.0 and bench.next_rate([1.0, 1.5], 1.0) == 0.5   # >= 2x
    assert bench.next_rate([0.4, 1.0, 2.0, 4.0], 1.0) is None
    assert bench.next_rate([0.4, 1.0], None) is None


def _fake_bench(monkeypatch, best: float, widen: int = 3) -> tuple[dict, list[dict]]:
    """select_and_repeat over fabricated runs whose validation loss is least at `best` (log scale)."""
    import math

    def run_one(args, out, scenario, model, lr, seed, workload):
        return _rec(model, lr=lr, val=abs(math.log(lr / best)) + 0.1, seed=seed)

    monkeypatch.setattr(bench, "run_one", run_one)
    args = argparse.Namespace(lrs=[0.4, 1.0, 2.0, 4.0], ranks=5, seeds=[0, 1, 2], widen=widen)
    return bench.select_and_repeat(args, None, "s", "bsp", {})


def _selection(runs: list[dict]) -> list[float]:
    return sorted(r["lr"] for r in runs if r.get("phase") == "selection")


def test_a_best_rate_at_the_edge_widens_the_grid_until_it_is_inside(monkeypatch):
    choice, runs = _fake_bench(monkeypatch, best=12.0)
    assert _selection(runs) == [0.4, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert choice == {"lr": 16.0, "warning": None}
    assert [(r["lr"], r["seed"]) for r in runs if "phase" not in r] == [(16.0, 1), (16.0, 2)]
    choice, runs = _fake_bench(monkeypatch, best=0.1)
    assert _selection(runs) == [0.0256, 0.064, 0.16, 0.4, 1.0, 2.0, 4.0]
    assert choice == {"lr": 0.064, "warning": None}


def test_widening_stops_after_widen_rates_and_flags_the_edge(monkeypatch):
    choice, runs = _fake_bench(monkeypatch, best=1000.0, widen=2)
    assert _selection(runs) == [0.4, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert choice["lr"] == 16.0 and "highest" in choice["warning"]
    choice, runs = _fake_bench(monkeypatch, best=1000.0, widen=0)
    assert _selection(runs) == [0.4, 1.0, 2.0, 4.0] and choice["lr"] == 4.0 and choice["warning"]
    choice, runs = _fake_bench(monkeypatch, best=1.5)                  # inside: no extra run
    assert _selection(runs) == [0.4, 1.0, 2.0, 4.0] and choice == {"lr": 2.0, "warning": None}


def test_the_schedule_is_picked_on_bsps_validation_loss_and_given_to_every_model(monkeypatch):
    import math

    calls = []

    def run_one(args, out, scenario, model, lr, seed, workload):
        schedule = workload.get("lr-schedule", "constant")
        calls.append((model, schedule, lr, seed))
        bonus = {"constant": 0.0, "cosine": -0.05, "linear": 0.02}[schedule]     # cosine: BSP's best
        return _rec(model, lr=lr, val=abs(math.log(lr)) + 0.3 + bonus, seed=seed, schedule=schedule)

    monkeypatch.setattr(bench, "run_one", run_one)
    args = argparse.Namespace(lrs=[0.4, 1.0, 2.0, 4.0], ranks=5, seeds=[0, 1], widen=0,
                              lr_schedules=["constant", "cosine", "linear"])
    workload, bsp_selected, others, picked = bench.pick_schedule(args, None, "s", {"epochs": "3"})
    assert picked["chosen"] == "cosine" and workload == {"epochs": "3", "lr-schedule": "cosine"}
    assert picked["tried"] == pytest.approx({"constant": 0.3, "cosine": 0.25, "linear": 0.32})
    assert {r["schedule"] for r in others} == {"constant", "linear"} and all(r["phase"] == "schedule" for r in others)
    calls.clear()
    choice, runs = bench.select_and_repeat(args, None, "s", "bsp", workload, bsp_selected)
    assert calls == [("bsp", "cosine", 1.0, 1)]            # BSP's grid under cosine is reused: only the seed runs
    assert choice == {"lr": 1.0, "warning": None} and {r["schedule"] for r in runs} == {"cosine"}
    calls.clear()
    bench.select_and_repeat(args, None, "s", "esp", workload)
    assert {c[1] for c in calls} == {"cosine"} and len(calls) == 5
    one = argparse.Namespace(**{**vars(args), "lr_schedules": ["linear"]})
    assert bench.pick_schedule(one, None, "s", {})[0] == {"lr-schedule": "linear"}
    assert bench.best_schedule({"a": ([_rec(ok=False)], None, None)}) is None


def test_a_diverged_top_rate_still_brackets_the_choice():
    grid = [_rec(lr=0.1, val=0.6), _rec(lr=0.2, val=0.5), _rec(lr=0.5, val=0.4), _rec(lr=1.0, ok=False)]
    assert bench.choose_rate(grid) == (0.5, None)


@pytest.mark.parametrize("lrs", [[0.1, 0.5, 1.0], [0.1, 0.2, 0.5], [0.1, 0.2, 0.4, 0.8], [0, 0.1, 0.5, 1.0]])
def test_rate_grid_needs_four_rates_spanning_ten_x(lrs):
    with pytest.raises(InputError, match="at least 4"):
        bench.check_grid(lrs)


def test_default_grid_is_valid():
    bench.check_grid(bench.DEFAULT_LRS)


def test_local_sgd_grid_is_scaled_by_the_trainers():
    args = argparse.Namespace(lrs=[0.1, 1.0], ranks=5)
    assert bench.rates_for(args, "localsgd-4") == [0.5, 5.0]
    assert bench.rates_for(args, "esp") == [0.1, 1.0] == bench.rates_for(args, "allreduce")


def test_pushes_and_bytes_to_target_are_read_off_the_pushes_curve_at_the_held_time():
    r = _rec(curve=([0.0, 1.0, 2.0, 3.0], [2.0, 1.5, 0.9, 0.8]), _pushes_curve=([0.0, 1.0, 2.0, 3.0], [0, 10, 30, 40]),
             bytes_per_push=2e6)
    bench.mark_times(r, 1.0)            # held from 1 + (1.5 - 1) / 0.6 = 1.833 s
    assert r["held_s"] == pytest.approx(1 + 0.5 / 0.6)
    assert r["pushes_to_target"] == pytest.approx(10 + 20 * 0.5 / 0.6)
    assert r["mb_to_target"] == pytest.approx(r["pushes_to_target"] * 2.0)
    bench.mark_times(r, 0.5)            # never held: nothing to count
    assert r["pushes_to_target"] is None and r["mb_to_target"] is None
    baseline = _rec(curve=([0.0, 1.0], [2.0, 0.5]))          # no server: no pushes curve
    bench.mark_times(baseline, 1.0)
    assert baseline["held_s"] is not None and baseline["pushes_to_target"] is None


# ---------------------------------------------------------------- target, held vs first touch

def test_target_is_from_bsps_best_final_validation_loss():
    runs = [_rec("bsp", val=0.40), _rec("bsp", val=0.35, seed=1), _rec("esp", val=0.20), _rec("bsp", ok=False)]
    assert bench.target_from(runs) == pytest.approx(1.03 * 0.35)
    assert bench.target_from([_rec("esp", val=0.3), _rec("asp", val=0.2)]) == pytest.approx(1.03 * 0.2)
    assert bench.target_from([_rec("bsp", ok=False)]) is None


def test_each_seed_has_its_own_target_from_its_bsp_runs():
    # the seed draws the data too: seed 1's problem ends higher, and its target must follow
    runs = [_rec("bsp", val=0.35), _rec("bsp", val=0.40, seed=1), _rec("esp", val=0.30, seed=1)]
    targets = bench.targets_by_seed(runs)
    assert targets == {0: pytest.approx(1.03 * 0.35), 1: pytest.approx(1.03 * 0.40)}


def test_held_time_differs_from_first_touch_when_the_curve_drifts_back_up():
    r = _rec(curve=([0.0, 1.0, 2.0, 3.0, 4.0], [1.0, 0.3, 0.6, 0.3, 0.3]))
    bench.mark_times(r, 0.4)
    assert r["touch_s"] < 1.0 < r["held_s"] <= 3.0


def test_run_ending_above_the_target_has_no_held_time_but_a_first_touch():
    r = _rec(curve=([0.0, 1.0, 2.0], [1.0, 0.3, 0.6]))
    bench.mark_times(r, 0.4)
    assert r["held_s"] is None and r["touch_s"] is not None
    bench.mark_times(r, None)
    assert r["held_s"] is None and r["touch_s"] is None


# ---------------------------------------------------------------- medians, ranges, "k/n held"

def test_spread_median_and_range():
    s = bench.spread([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.n, s.missing) == (2.0, 1.0, 3.0, 3, 0)
    assert bench.spread([1.0, 4.0]).median == 2.5
    assert bench.spread([]) is None
    assert bench.format_spread([0.30, 0.25, 0.40]) == "0.3000 [0.2500-0.4000]"
    assert bench.format_spread([0.3]) == "0.3000"


def test_not_held_counts_as_infinitely_late_and_says_k_of_n():
    assert bench.format_time([2.0, 1.0, None]) == "2.00 [1.00-not held] (2/3 held)"
    assert bench.format_time([2.0, None, None]) == "not held [2.00-not held] (1/3 held)"
    assert bench.format_time([None, None, None]) == "not held (0/3)"
    assert bench.format_time([1.5, 1.0, 2.0]) == "1.50 [1.00-2.00]"


def test_ratio_to_bsp_uses_medians_and_needs_both_held():
    assert bench.ratio_to([4.0, 5.0, 6.0], [2.0, 2.5, 9.0]) == "2.00"
    assert bench.ratio_to([4.0, 5.0, 6.0], [2.0, None, None]) == "-"
    assert bench.ratio_to([None, None], [1.0]) == "-"


def test_table_row_is_the_median_over_the_chosen_rate_seeds():
    runs = [_rec("esp", lr=0.2, seed=s, held_s=h, touch_s=t, test_loss=tl, test_accuracy=0.8, total_wait_s=1.0,
                 wall_s=w, samples=1000, step_time_ratio=1.1)
            for s, h, t, tl, w in ((0, 2.0, 1.0, 0.30, 5.0), (1, None, 1.5, 0.34, 6.0), (2, 3.0, 2.0, 0.32, 7.0))]
    row = dict(zip(bench.HEADERS, bench.table_row("esp", {"lr": 0.2, "warning": "edge"}, runs, [4.0, 6.0, 6.0])))
    assert row["lr"] == "0.2 (edge)"
    assert row["held time to target s (val)"] == "3.00 [2.00-not held] (2/3 held)"
    assert row["ratio to BSP"] == "2.00"
    assert row["first touch s (val)"] == "1.50 [1.00-2.00]"
    assert row["final test loss"] == "0.3200 [0.3000-0.3400]"
    assert row["wall s"] == "6.00 [5.00-7.00]"


def test_contention_is_flagged_only_in_the_homogeneous_scenario():
    runs = [_rec("asp", scenario=sc, step_time_ratio=1.6) for sc in ("homogeneous", "straggler")]
    for r, sc in zip(runs, ("homogeneous", "straggler")):
        r["scenario"] = sc
    choices = {(sc, "asp"): {"lr": 0.1, "warning": None} for sc in ("homogeneous", "straggler")}
    assert any("contention" in n for n in bench.scenario_notes(runs, "homogeneous", ["asp"], choices))
    assert not any("contention" in n for n in bench.scenario_notes(runs, "straggler", ["asp"], choices))


def test_model_recipes():
    assert bench.model_run("psp-zipline", 5).flags == ("--sync", "psp", "--psp-wait", "idle")
    assert bench.model_run("ssp", 5).flags == ("--sync", "ssp", "--staleness", "3")
    for ablation, flag in (("esp-noeff", "--esp-efficiency"), ("esp-noprobe", "--esp-probe"),
                           ("esp-novalue", "--esp-value")):
        assert bench._model_spec(ablation) == ablation
        assert bench.model_run(ablation, 5).flags == ("--sync", "esp", flag, "off")
    ls = bench.model_run("localsgd-16", 5)
    assert ls.module == "mpikanel.baselines.local_sgd" and ls.flags == ("--local-steps", "16") and ls.lr_scale == 5
    for bad in ("localsgd-0", "localsgd-x", "nope", "asp:3"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench._model_spec(bad)


@pytest.mark.parametrize("name", sorted(bench.ABLATIONS))
def test_every_named_variant_is_a_valid_train_command_that_differs_from_its_model(name):
    from mpikanel.config import config_from_args
    flags = bench.ABLATIONS[name]
    variant, plain = config_from_args(list(flags)), config_from_args(list(flags[:2]))
    assert variant != plain, name                  # a variant equal to the default measures nothing


@pytest.mark.parametrize("model", ["bsp", "allreduce", "localsgd-4", "torch-ddp"])
def test_step_time_paces_every_model_baselines_included(model, tmp_path):
    def command(step_time):
        args = argparse.Namespace(ranks=3, engine="mpi", step_time=step_time, val_fraction=0.1)
        return bench.run_command(args, tmp_path, "straggler", model, 0.1, 0, dict(bench.QUICK))[0]

    cmd, unpaced = command(0.02), command(None)
    assert cmd[cmd.index("--step-time") + 1] == "0.02" and cmd[cmd.index("--slowdown") + 1] == "1:4"
    assert "--step-time" not in unpaced


@pytest.mark.parametrize("model", ["bsp", "allreduce"])
def test_a_workload_of_another_data_and_model_reaches_every_run_and_replaces_the_synthetic_one(model, tmp_path):
    args = argparse.Namespace(ranks=5, engine="mpi", step_time=None, val_fraction=0.1, quick=False, warmup=0,
                              synthetic_rows=None, synthetic_features=None, batch_size=None, epochs=2,
                              snapshot_interval=None, data="fashion-mnist", train_model="py:cnn.py:make",
                              input_shape="1,28,28", curve_points=16, slowdown="1:3")
    workload = bench._workload(args)
    assert "synthetic-rows" not in workload and "synthetic-features" not in workload
    cmd = bench.run_command(args, tmp_path, "straggler", model, 0.1, 0, workload)[0]
    flag = {k: cmd[cmd.index(k) + 1] for k in ("--data", "--model", "--input-shape", "--curve-points",
                                               "--slowdown", "--epochs")}
    assert flag == {"--data": "fashion-mnist", "--model": "py:cnn.py:make", "--input-shape": "1,28,28",
                    "--curve-points": "16", "--slowdown": "1:3", "--epochs": "2"}
    assert cmd.count("--slowdown") == 1
    # --slowdown replaces a scenario's straggler; a scenario without one gets none
    assert "--slowdown" not in bench.run_flags(args, "homogeneous")
    assert bench.run_flags(argparse.Namespace(step_time=None, slowdown=None), "straggler")["slowdown"] == "1:4"


def test_runs_whose_pacing_was_not_held_are_noted():
    runs = [_rec("allreduce", scenario="straggler", pacing_held=False, pacing_missed_share=0.2),
            _rec("bsp", scenario="straggler", pacing_held=True, pacing_missed_share=0.0)]
    choices = {("straggler", m): {"lr": 0.1, "warning": None} for m in ("allreduce", "bsp")}
    notes = bench.scenario_notes(runs, "straggler", ["allreduce", "bsp"], choices)
    assert notes == ["- allreduce lr 0.1 seed 0: pacing not held (20% of steps computed longer than modeled)"]


# ---------------------------------------------------------------- end to end

def _bench_quick(out, timeout, *args):
    """Run `bench sync --quick` of the straggler scenario at 3 ranks, BSP and `args` (more models first) into
    `out`; its results.json."""
    pytest.importorskip("matplotlib")
    cmd = [sys.executable, "-m", "mpikanel.bench", "sync", "--scenario", "straggler", "--models", "bsp", *args,
           "--ranks", "3", "--quick", "--widen", "0", "--timeout", "120", "--allow-dirty", "--out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hang: bench sync did not finish in {timeout} s\n{exc.stderr}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "results.json").read_text())


@pytest.mark.timeout(900)         # four launches; each starts 3 Python processes (slow on a loaded machine)
def test_bench_sync_quick_end_to_end(tmp_path):
    """Two rates, two seeds, two schedules on the tiny workload: files, selection and seeds recorded.
    (A baseline's own rate grid: the paced test below.)"""
    out = tmp_path / "bench"
    res = _bench_quick(out, 840, "--lrs", "0.05", "0.2", "--seeds", "0", "1", "--lr-schedules", "constant", "cosine")
    assert res["seeds"] == [0, 1] and res["git_commit"] and res["versions"]["mpi4py"] and res["nproc"] >= 1
    assert len(res["load_average_before"]) == 3 and "mpikanel.bench" in res["command"]
    table = res["tables"]["straggler"]
    chosen_schedule = res["schedules"]["straggler"]["chosen"]        # on BSP's validation; every model runs it
    assert set(res["schedules"]["straggler"]["tried"]) == {"constant", "cosine"}
    assert {r["schedule"] for r in res["runs"]} == {chosen_schedule}
    assert [r["model"] for r in res["schedule_runs"]] == ["bsp", "bsp"]
    assert {r["schedule"] for r in res["schedule_runs"]} == {"constant", "cosine"} - {chosen_schedule}
    assert set(table["target_loss"]) == {"0", "1"} and all(v > 0 for v in table["target_loss"].values())
    runs = res["runs"]
    chosen = table["chosen"]["bsp"]["lr"]
    assert {r["lr"] for r in runs if r.get("phase") == "selection"} == {0.05, 0.2} and chosen in {0.05, 0.2}
    assert sorted(r["seed"] for r in runs if r["lr"] == chosen) == [0, 1]
    assert all(r["ok"] and r["samples"] > 0 and r["val_loss"] > 0 for r in runs)
    md = (out / "results.md").read_text()
    assert "### straggler" in md and "held time to target s (val)" in md and "| bsp |" in md
    held = [r for r in res["runs"] if r["held_s"] is not None]
    assert held and all(0 < r["pushes_to_target"] <= r["samples"] and r["mb_to_target"] > 0 for r in held)
    assert (out / "straggler-val-loss.png").stat().st_size > 1000
    prov = (out / "provenance.json").read_text()
    assert json.loads(prov)["exit_code"] == 0 and json.loads(prov)["mpi_library"]
    # the report rebuilt from the files alone (the directory moved): same tables, the original command kept
    moved = tmp_path / "moved"
    out.rename(moved)
    (moved / "results.md").unlink()
    from mpikanel.bench.__main__ import main
    assert main(["sync", "--report-only", "--out", str(moved)]) == 0
    rebuilt = json.loads((moved / "results.json").read_text())
    assert rebuilt["command"] == res["command"] and rebuilt["git_commit"] == res["git_commit"]
    assert rebuilt["tables"]["straggler"]["rows"] == table["rows"]
    assert "report rebuilt at commit" in (moved / "results.md").read_text()
    assert (moved / "provenance.json").read_text() == prov      # the run's, not the rebuild's


def test_esp_notes_compare_the_round_trip_with_the_injected_delay_and_report_probe_cost():
    def rec(scenario, rtt, **kw):
        return {"scenario": scenario, "model": "esp", "lr": 1.0, "seed": 0, "ok": True, "rtt1_s": rtt, **kw}
    records = [rec("homogeneous", 0.004), rec("slow-link", 0.036, probes=200, probe_server_us=12.0, probe_rtt_ms=0.5)]
    choices = {("slow-link", "esp"): {"lr": 1.0}, ("homogeneous", "esp"): {"lr": 1.0}}
    notes = bench.esp_notes(records, "slow-link", ["bsp", "esp"], choices)
    assert "36.0 ms against the injected 30 ms + the unloaded 4.0 ms (homogeneous) = 34.0 ms" in notes[0]
    assert "200 probes per run" in notes[1] and "12.0 µs per probe" in notes[1]
    assert bench.esp_notes(records, "homogeneous", ["esp"], choices)[0].endswith("4.0 ms")


def test_psp_notes_report_prediction_error_fallback_and_wait_against_bsp():
    def rec(model, seed, wait, **kw):
        return {"scenario": "straggler", "model": model, "lr": 2.0, "seed": seed, "ok": True, "total_wait_s": wait, **kw}
    records = [rec("bsp", s, 8.0) for s in range(3)]
    records += [rec("psp", s, 1.0, psp_error=e, psp_error_p90=0.3, psp_fallback=0.0) for s, e in enumerate([0.1, 0.05, 0.2])]
    choices = {("straggler", m): {"lr": 2.0} for m in ("bsp", "psp")}
    notes = bench.psp_notes(records, "straggler", ["bsp", "psp"], choices)
    assert notes == ["- psp: prediction error median 0.100 [0.050-0.200], p90 0.300 [0.300-0.300]; "
                     "fallback rounds 0.0 [0.0-0.0]%; total wait 0.12x BSP's"]


@pytest.mark.timeout(300)
def test_bench_sync_quick_paced_runs_the_baselines_paced_too(tmp_path):
    """--step-time reaches a baseline as it reaches the parameter server's workers, and the report says so."""
    out = tmp_path / "bench"
    res = _bench_quick(out, 240, "allreduce", "localsgd-4", "--lrs", "0.2", "--seeds", "0", "--step-time", "0.005")
    assert res["step_time"] == 0.005 and res["tables"]["straggler"]["flags"]["step-time"] == "0.005"
    assert {r["model"]: r["lr"] for r in res["runs"]} == {"bsp": 0.2, "allreduce": 0.2, "localsgd-4": 0.6}
    for r in res["runs"]:
        assert r["ok"] and "--step-time" in r["command"] and r["pacing_held"] is not None
    md = (out / "results.md").read_text()
    assert "paced at --step-time 0.005 s" in md and "`--slowdown 1:4 --step-time 0.005`" in md
    assert all(r["pushes_to_target"] is None for r in res["runs"] if r["model"] != "bsp")   # baselines push nothing
    assert "| localsgd-4 |" in md


def test_baselines_have_no_pushes_to_target_rather_than_not_held():
    runs = [_rec(m, lr=0.2, seed=0, held_s=2.0, touch_s=1.0, test_loss=0.3, test_accuracy=0.8, total_wait_s=1.0,
                 wall_s=5.0, samples=1000, step_time_ratio=1.1) for m in ("allreduce", "bsp")]
    rows = {m: dict(zip(bench.HEADERS, bench.table_row(m, {"lr": 0.2, "warning": None}, [r], [2.0])))
            for m, r in zip(("allreduce", "bsp"), runs)}
    assert rows["allreduce"]["pushes to target"] == rows["allreduce"]["MB to target"] == "-"
    assert rows["bsp"]["pushes to target"] == "not held"   # a server model that pushed nothing by then
