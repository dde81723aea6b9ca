"""Rate schedules over the work budget and staleness damping: pure functions, then the engine."""
import math

import numpy as np
import pytest

from mpikanel.config import make_config
from mpikanel.engine.worker_core import StepPlan
from mpikanel.errors import InputError
from mpikanel.lr_schedule import scheduled_rate
from mpikanel.sim.run import SimOptions, simulate
from mpikanel.sync.damping import StalenessDamping


def test_schedules_ramp_then_decay_to_zero():
    assert scheduled_rate(0.2, "constant", 0.0, 0.7) == 0.2
    assert scheduled_rate(0.2, "linear", 0.0, 0.25) == pytest.approx(0.15)
    assert scheduled_rate(0.2, "cosine", 0.0, 0.5) == pytest.approx(0.1)
    assert scheduled_rate(0.2, "cosine", 0.0, 1.0) == pytest.approx(0.0)
    # warm-up: a linear ramp from 0 over the first 10%, then the schedule over the rest
    assert scheduled_rate(0.2, "linear", 0.1, 0.05) == pytest.approx(0.1)
    assert scheduled_rate(0.2, "linear", 0.1, 0.1) == pytest.approx(0.2)
    assert scheduled_rate(0.2, "linear", 0.1, 0.55) == pytest.approx(0.1)
    assert scheduled_rate(0.2, "constant", 0.0, 3.0) == 0.2 and scheduled_rate(0.2, "linear", 0.0, 3.0) == 0.0


def test_a_constant_rate_is_the_plain_rate_bitwise():
    plan = StepPlan(1, 64, 0.1, 0.0, 2)
    assert plan.constant and plan.rate_for(64, 0.9) == 0.1 and plan.rate_for(16) == 0.1 * (16 / 64)
    scheduled = StepPlan(1, 64, 0.1, 0.0, 2, schedule="linear")
    assert scheduled.rate_for(32, 0.5) == pytest.approx(0.1 * 0.5 * 0.5)


@pytest.mark.parametrize("flags,match", [({"lr_schedule": "step"}, "--lr-schedule"), ({"warmup": 1.0}, "--warmup"),
                                         ({"staleness_lr": "sqrt"}, "--staleness-lr")])
def test_bad_schedule_flags_are_one_line(flags, match):
    with pytest.raises(InputError, match=match):
        make_config(**flags)


def test_inverse_damping_and_the_gap_in_typical_updates():
    inverse, gap, off = StalenessDamping("inverse"), StalenessDamping("gap"), StalenessDamping("off")
    for v in range(1, 101):              # 100 updates of norm 1, then 10 of norm 0.1
        for d in (inverse, gap, off):
            d.observe(v, 1.0)
    for v in range(101, 111):
        for d in (inverse, gap, off):
            d.observe(v, 0.1)
    assert off.scale(110, 100) == 1.0 and inverse.scale(110, 110) == 1.0 and gap.scale(110, 110) == 1.0
    assert inverse.scale(110, 100) == pytest.approx(1 / 11)
    # the 10 versions since the base moved 1.0 in all; the typical update of the last 64 is 55/64
    assert gap.scale(110, 100) == pytest.approx(1 / (1 + 1.0 / (55.0 / 64)), rel=1e-6)
    assert gap.scale(110, 90) < gap.scale(110, 100)      # staler: damped more


SMALL = dict(synthetic_rows=6000, epochs=2, quiet=True, progress="off", snapshot_interval=0.01, slowdown="1:3")


def run(**overrides) -> dict:
    return simulate(make_config({**SMALL, **overrides}), SimOptions(4, step_time=1e-3))


@pytest.mark.parametrize("sync", ["bsp", "asp", "ssp", "esp", "psp"])
def test_every_model_steps_along_the_same_schedule_of_the_budget(sync, monkeypatch):
    seen = []
    original = StepPlan.rate_for

    def recording(self, rows, progress=0.0):
        seen.append(progress)
        return original(self, rows, progress)

    monkeypatch.setattr(StepPlan, "rate_for", recording)
    s = run(sync=sync, lr_schedule="linear", warmup=0.1)
    assert len(seen) == sum(w["steps"] for w in s["per_worker"])
    # each step knows how far through the shared budget the cluster is: never past its end, and
    # the last steps near it whichever worker takes them and however stale its view
    assert 0.0 < min(seen) < 0.01 and 0.97 < max(seen) <= 1.0
    assert s["samples"] == s["samples_budget"]


def test_bsp_with_a_schedule_is_bitwise_reproducible_and_the_schedule_matters():
    a = run(sync="bsp", lr_schedule="cosine", warmup=0.05)
    b = run(sync="bsp", lr_schedule="cosine", warmup=0.05, slowdown="2:4", link_delay="*:0.002")
    assert a["params_sha256"] == b["params_sha256"]
    assert run(sync="bsp")["params_sha256"] != a["params_sha256"]


@pytest.mark.parametrize("damping", ["inverse", "gap"])
def test_damping_keeps_every_delta_accounted_for_and_leaves_bsp_alone(damping):
    s = run(sync="asp", staleness_lr=damping)
    assert s["delta_sum_rel_error"] < 1e-9 and s["samples"] == s["samples_budget"]
    plain = run(sync="asp")
    assert s["params_sha256"] != plain["params_sha256"]          # stale deltas were damped
    assert run(sync="bsp", staleness_lr=damping)["params_sha256"] == run(sync="bsp")["params_sha256"]
