"""Paced workers (--step-time): the pacing arithmetic, the driver, and paced real runs against the simulator."""
import numpy as np
import pytest

from mpikanel.config import make_config
from mpikanel.engine.worker_core import WAIT, Compute
from mpikanel.errors import InputError
from mpikanel.hetero import HeteroSpec, Injector

BATCH = 64


def test_a_fast_step_sleeps_the_rest_of_the_modeled_step():
    pace = Injector(HeteroSpec(), 1, 2).pace(0.003, BATCH, BATCH, 0.01)
    assert pace.modeled_s == pytest.approx(0.01)
    assert pace.sleep_s == pytest.approx(0.007)
    assert pace.compute_s + pace.sleep_s == pytest.approx(0.01)
    assert pace.injected_s == 0.0 and pace.held


def test_a_partial_batch_is_modeled_in_proportion_to_its_rows():
    pace = Injector(HeteroSpec(), 1, 2).pace(0.0, 16, BATCH, 0.01)
    assert pace.modeled_s == pytest.approx(0.0025) and pace.sleep_s == pytest.approx(0.0025)


def test_the_slowdown_scales_the_modeled_step_not_the_compute():
    inj = Injector(HeteroSpec(slowdown="1:3"), 1, 2)
    fast = inj.pace(0.004, BATCH, BATCH, 0.01)          # compute within the base step
    assert fast.modeled_s == pytest.approx(0.03) and fast.sleep_s == pytest.approx(0.026)
    assert fast.injected_s == pytest.approx(0.02)       # what the factor added to the step
    mid = inj.pace(0.015, BATCH, BATCH, 0.01)           # compute beyond the base, within the modeled step
    assert mid.sleep_s == pytest.approx(0.015) and mid.injected_s == pytest.approx(0.015) and mid.held
    assert inj.injected_s == pytest.approx(0.04)        # the injector counts the modeled injection


def test_a_step_whose_compute_outlasts_the_model_sleeps_nothing_and_is_counted():
    pace = Injector(HeteroSpec(slowdown="1:2"), 1, 2).pace(0.05, BATCH, BATCH, 0.01)
    assert pace.sleep_s == 0.0 and pace.injected_s == 0.0 and not pace.held
    assert pace.modeled_s == pytest.approx(0.02)


def test_a_pause_adds_to_the_modeled_step():
    pace = Injector(HeteroSpec(pause_prob=1.0, pause_s=0.5), 1, 2).pace(0.001, BATCH, BATCH, 0.01)
    assert pace.modeled_s == pytest.approx(0.51) and pace.injected_s == pytest.approx(0.5)


@pytest.mark.parametrize("slowdown", [None, "1:2.5", "1:1->4@3", "lognormal:0.7"])
def test_the_modeled_steps_are_the_simulators(slowdown):
    spec = HeteroSpec(slowdown=slowdown, pause_prob=0.3, pause_s=0.02, seed=5)
    real, sim = Injector(spec, 1, 3, 10), Injector(spec, 1, 3, 10)
    rows = [BATCH] * 9 + [20]
    paced = [real.pace(0.0, r, BATCH, 0.01).modeled_s for r in rows]
    modeled = []
    for r in rows:              # Simulator._advance: base = step_s * rows / batch; slow = compute_delay(base)
        base = 0.01 * r / BATCH
        modeled.append(base + sim.compute_delay(base))
    assert paced == modeled
    assert real.step == len(rows)


class _Client:
    """An exchanger stub: the driver only calls wait() on it here."""

    def wait(self):
        return "reply"


def test_the_driver_sleeps_the_rest_and_answers_compute_slept_injected(monkeypatch):
    import mpikanel.worker_loop as loop

    slept, answers = [], []

    def fake_core(*args, **kwargs):
        answers.append((yield Compute(0.002, 0.002, BATCH)))
        answers.append((yield WAIT))
        answers.append((yield Compute(0.030, 0.030, BATCH)))
        stats = loop.WorkerStats(rank=1, rows=0)
        return None, stats

    monkeypatch.setattr(loop, "worker_core", fake_core)
    monkeypatch.setattr(loop, "sleep_for", slept.append)
    inj = Injector(HeteroSpec(slowdown="1:2"), 1, 2)
    _, stats = loop.run_worker(_Client(), None, None, make_plan(), None, 1, inj, step_time=0.01)
    assert slept == [pytest.approx(0.018), 0.0]
    assert answers[0] == pytest.approx((0.002, 0.018, 0.01))
    assert answers[1] == "reply"
    assert answers[2] == pytest.approx((0.030, 0.0, 0.0))
    assert stats.paced_s == pytest.approx(0.04) and stats.pacing_missed == 1


def test_without_step_time_the_driver_injects_on_cpu_time_as_before(monkeypatch):
    import mpikanel.worker_loop as loop

    slept, answers = [], []

    def fake_core(*args, **kwargs):
        answers.append((yield Compute(0.004, 0.002, BATCH)))
        return None, loop.WorkerStats(rank=1, rows=0)

    monkeypatch.setattr(loop, "worker_core", fake_core)
    monkeypatch.setattr(loop, "sleep_for", slept.append)
    _, stats = loop.run_worker(_Client(), None, None, make_plan(), None, 1, Injector(HeteroSpec(slowdown="1:3"), 1, 2))
    assert slept == [pytest.approx(0.004)] and answers == [pytest.approx((0.004, 0.004, 0.004))]
    assert stats.paced_s == 0.0


def make_plan():
    from mpikanel.engine.worker_core import StepPlan
    return StepPlan(epochs=1, batch_size=BATCH, lr=0.1, l2=0.0, n_classes=2)


@pytest.mark.parametrize("value", [-1.0, 0.0, float("inf"), float("nan")])
def test_step_time_must_be_a_positive_finite_number(value):
    with pytest.raises(InputError, match="--step-time"):
        make_config(step_time=value)


def test_one_step_time_flag_for_train_and_the_simulator():
    from mpikanel.config import config_from_args
    from mpikanel.sim.__main__ import parser

    assert config_from_args(["--step-time", "0.02"]).step_time == 0.02
    ns = vars(parser().parse_args(["--workers", "3", "--step-time", "0.02"]))
    assert ns["step_time"] == 0.02


def test_the_simulator_takes_its_step_time_from_the_config():
    from mpikanel.sim.run import SimOptions, simulate

    s = simulate(make_config(synthetic_rows=3000, epochs=1, quiet=True, progress="off", step_time=0.004),
                 SimOptions(2))
    assert s["sim"]["step_s_min"] == s["sim"]["step_s_max"] == 0.004
    assert s["step_time"] == 0.004 and s["pacing_held"] is None


# --- real runs under mpiexec ----------------------------------------------------------------------

PACED = ["--synthetic-rows", "6000", "--epochs", "1", "--step-time", "0.02"]


@pytest.mark.alone
def test_a_paced_run_lasts_its_modeled_steps_and_says_so(tmp_path):
    from launch import run_train

    proc, s = run_train(4, *PACED, "--slowdown", "2:2", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert s["step_time"] == 0.02 and s["pacing_held"] is True, s["pacing_missed_share"]
    assert "pacing not held" not in proc.stderr
    for w in s["per_worker"]:
        factor = 2.0 if w["rank"] == 2 else 1.0
        # modeled: 0.02 s per 64 rows (a partial batch in proportion), times the worker's slowdown
        assert w["paced_s"] == pytest.approx(factor * 0.02 * w["samples"] / 64)
        step_s = w["compute_s"] + w["injected_s"] + w["pacing_s"]
        assert step_s >= w["paced_s"] - 1e-9 and w["compute_s"] < 0.5 * step_s
        assert w["pacing_missed_share"] <= 0.05
        assert w["compute_s"] + w["comm_s"] + w["wait_s"] + w["pacing_s"] + w["injected_s"] <= s["wall_s"] + 1.0
    slow = s["per_worker"][1]
    assert slow["injected_s"] == pytest.approx(0.5 * slow["paced_s"], rel=0.05)
    assert s["wall_s"] >= max(w["paced_s"] for w in s["per_worker"])
    # an accelerator-bound job: its ranks' CPUs mostly wait, and waiting costs next to nothing: ranks 1
    # and 3 wait for the straggler (rank 2) half the time, which cost them 3.6-6x its CPU seconds with
    # MPI's own waits and 1.8x with mpikanel.comm.waits (2 cores, load 7-9)
    cpu = [w["cpu_s"] for w in s["per_worker"]]
    assert all(0 < c < 0.1 * s["wall_s"] for c in cpu) and max(cpu[0], cpu[2]) < 2.5 * cpu[1], cpu
    assert 0 < s["server_cpu_s"] < 0.5 * s["wall_s"] and s["cores_used"] < 0.6, (s["cores_used"], s["server_cpu_s"])
    assert 0 < s["startup_s"] < 120


@pytest.mark.parametrize("schedule", [(), ("--lr-schedule", "cosine", "--warmup", "0.1")], ids=["constant", "cosine"])
def test_real_bsp_equals_simulated_bsp_bitwise(schedule, tmp_path):
    import subprocess
    import sys
    import json

    from launch import clean_env, run_train

    flags = ["--synthetic-rows", "3000", "--epochs", "1", "--step-time", "0.002", "--slowdown", "1:3",
             "--sync", "bsp", "--quiet", *schedule]
    proc, real = run_train(4, *flags, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "sim.json"
    sim = subprocess.run([sys.executable, "-m", "mpikanel.sim", "--workers", "3", *flags, "--summary-json", str(out)],
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert sim.returncode == 0, sim.stderr
    sim = json.loads(out.read_text())
    assert sim["versions"]["mpi"].startswith("simulator")
    assert real["samples"] == sim["samples"] and real["deltas_applied"] == sim["deltas_applied"]
    assert real["params_sha256"] == sim["params_sha256"]



# --- the summary's pacing keys, shared by mpikanel.train and the baselines --------------------------

def _worker(steps, missed, paced_s=1.0, **kw):
    return {"steps": steps, "pacing_missed": missed, "paced_s": paced_s, "compute_s": 0.1, "injected_s": 0.0, **kw}


def test_pacing_is_held_up_to_five_percent_of_missed_steps():
    from mpikanel.summary import pacing_fields

    workers = [_worker(100, 5), _worker(100, 5)]
    assert pacing_fields(0.02, workers) == {"step_time": 0.02, "pacing_missed_share": 0.05, "pacing_held": True}
    assert [w["pacing_missed_share"] for w in workers] == [0.05, 0.05]
    late = pacing_fields(0.02, [_worker(100, 5), _worker(100, 7)])
    assert late["pacing_missed_share"] == pytest.approx(0.06) and late["pacing_held"] is False


def test_an_unpaced_run_has_no_pacing_verdict():
    from mpikanel.summary import pacing_fields

    assert pacing_fields(None, [_worker(10, 0, paced_s=0.0)]) == {"step_time": None, "pacing_missed_share": None,
                                                                  "pacing_held": None}


def test_pacing_not_held_is_said_on_stderr_once(capsys):
    from mpikanel.summary import pacing_fields, warn_pacing

    warn_pacing(pacing_fields(0.01, [_worker(10, 0)]))
    assert capsys.readouterr().err == ""
    warn_pacing(pacing_fields(0.01, [_worker(10, 4)]))
    assert capsys.readouterr().err == ("mpikanel: pacing not held: 40% of steps computed longer than their modeled "
                                       "time (--step-time 0.01)\n")


def test_the_step_time_ratio_counts_the_pacing_sleep():
    from mpikanel.summary import add_step_time_rel

    workers = [_worker(10, 0, pacing_s=0.9), _worker(10, 0, pacing_s=0.1, injected_s=2.0)]
    add_step_time_rel(workers)
    assert [w["step_time_rel"] for w in workers] == [pytest.approx(1.0), pytest.approx(2.2)]
