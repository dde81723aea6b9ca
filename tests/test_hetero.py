"""Heterogeneity injection: slowdown factors, lognormal factors, seeded pauses, link delays, bad specs."""
import subprocess
import sys
import time

import pytest

from mpikanel.errors import InputError
from mpikanel.hetero import HeteroSpec, Injector, describe_hetero, lognormal_factors, parse_hetero, sleep_for


def test_fixed_slowdown_factor():
    spec = HeteroSpec(slowdown="1:4")
    slow, other = Injector(spec, 1, 3), Injector(spec, 2, 3)
    assert slow.factor == 4.0 and other.factor == 1.0
    assert slow.compute_delay(0.01) == pytest.approx(0.03)
    assert other.compute_delay(0.01) == 0.0
    assert slow.active and not other.active


def test_several_slowdowns_and_server_is_untouched():
    spec = HeteroSpec(slowdown="1:4, 3:2")
    assert [Injector(spec, r, 3).factor for r in (1, 2, 3)] == [4.0, 1.0, 2.0]
    server = Injector(spec, 0, 3)
    assert server.factor == 1.0 and not server.active


def test_lognormal_factors_reproducible_same_on_every_rank():
    spec = HeteroSpec(slowdown="lognormal:0.5", seed=7)
    views = [[Injector(spec, r, 8).factor for r in range(1, 9)] for _ in range(2)]
    assert views[0] == views[1]
    assert views[0] == list(lognormal_factors(0.5, 8, 7))
    assert all(f >= 1.0 for f in views[0])
    assert any(f > 1.0 for f in views[0])
    other_seed = [Injector(HeteroSpec(slowdown="lognormal:0.5", seed=8), r, 8).factor for r in range(1, 9)]
    assert other_seed != views[0]


def test_lognormal_zero_sigma_is_no_slowdown():
    assert Injector(HeteroSpec(slowdown="lognormal:0"), 1, 4).factor == 1.0


def _pause_pattern(spec, rank, steps):
    inj = Injector(spec, rank, 4)
    return [inj.compute_delay(0.0) > 0 for _ in range(steps)]


def test_pauses_seeded_and_at_the_asked_frequency():
    spec = HeteroSpec(pause_prob=0.1, pause_s=0.5, seed=3)
    a = _pause_pattern(spec, 2, 20_000)
    assert a == _pause_pattern(spec, 2, 20_000)
    assert abs(sum(a) / len(a) - 0.1) < 0.01
    assert a != _pause_pattern(spec, 3, 20_000)
    assert a != _pause_pattern(HeteroSpec(pause_prob=0.1, pause_s=0.5, seed=4), 2, 20_000)


def test_pause_draws_do_not_depend_on_measured_time():
    spec = HeteroSpec(slowdown="1:2", pause_prob=0.3, pause_s=1.0, seed=1)
    x, y = Injector(spec, 1, 2), Injector(spec, 1, 2)
    for step in range(1, 200):
        dx, dy = x.compute_delay(0.001), y.compute_delay(0.5)
        assert (dx >= 1.0) == (dy >= 1.0) == x.pauses_at(step)
    assert x.injected_s == pytest.approx(0.001 * 199 + 1.0 * sum(x.pauses_at(s) for s in range(1, 200)))


def test_pause_delay_value():
    inj = Injector(HeteroSpec(pause_prob=1.0, pause_s=0.25), 1, 1)
    assert inj.compute_delay(0.01) == 0.25 and inj.active


def test_link_delay_and_bandwidth():
    spec = HeteroSpec(link_delay="*:0.001,2:0.005", link_bandwidth="2:50e6")
    r1, r2 = Injector(spec, 1, 2), Injector(spec, 2, 2)
    assert r1.link_delay(10**6) == pytest.approx(0.001)
    assert r2.link_delay(10**6) == pytest.approx(0.005 + 0.02)
    assert r1.active and r2.active
    assert Injector(HeteroSpec(link_bandwidth="*:1e6"), 1, 1).link_delay(500) == pytest.approx(5e-4)


def test_no_injection_by_default():
    inj = Injector(HeteroSpec(), 1, 4)
    assert not inj.active
    assert inj.compute_delay(1.0) == 0.0 and inj.link_delay(10**9) == 0.0
    assert describe_hetero(HeteroSpec()) == "homogeneous"


@pytest.mark.parametrize("kwargs,match", [
    ({"slowdown": "1:0.5"}, ">= 1"),
    ({"slowdown": "5:2"}, "1..4"),
    ({"slowdown": "0:2"}, "not a worker"),
    ({"slowdown": "1:x"}, "not a number"),
    ({"slowdown": "1"}, "RANK:VALUE"),
    ({"slowdown": "a:2"}, "not an integer"),
    ({"slowdown": "*:2"}, "not an integer"),
    ({"slowdown": "1:2,1:3"}, "twice"),
    ({"slowdown": "lognormal:-1"}, "sigma"),
    ({"slowdown": "lognormal:abc"}, "not a number"),
    ({"pause_prob": 1.5, "pause_s": 1}, r"\[0, 1\]"),
    ({"pause_prob": -0.1}, r"\[0, 1\]"),
    ({"pause_prob": 0.1, "pause_s": -1}, "pause-s"),
    ({"link_delay": "2:-0.1"}, ">= 0"),
    ({"link_delay": "9:0.1"}, "not a worker"),
    ({"link_delay": "2=0.1"}, "RANK:VALUE"),
    ({"link_bandwidth": "2:0"}, "> 0"),
    ({"link_bandwidth": "2:fast"}, "not a number"),
])
def test_bad_specs_raise_input_error(kwargs, match):
    spec = HeteroSpec(**kwargs)
    with pytest.raises(InputError, match=match) as info:
        parse_hetero(spec, 4)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError):
        Injector(spec, 1, 4)


def test_good_spec_parses():
    parse_hetero(HeteroSpec(slowdown="1:4,3:2", pause_prob=0.01, pause_s=0.1,
                            link_delay="*:0.001", link_bandwidth="2:50e6"), 4)


def test_sleep_for_sleeps_without_busy_wait():
    sleep_for(0)
    sleep_for(-1)
    wall, cpu = time.perf_counter(), time.process_time()
    sleep_for(0.05)
    assert time.perf_counter() - wall >= 0.045
    assert time.process_time() - cpu < 0.03


def test_pure_modules_do_not_import_mpi():
    code = ("import sys, mpikanel.hetero, mpikanel.metrics, mpikanel.plot; "
            "sys.exit('mpi4py' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_worker_that_slows_down_mid_run():
    spec = HeteroSpec(slowdown="2:1->4@50%")
    w = Injector(spec, 2, 3, expected_steps=10)
    assert [w.factor_at(s) for s in (1, 5, 6, 20)] == [1.0, 1.0, 4.0, 4.0]
    delays = [w.compute_delay(0.01) for _ in range(7)]
    assert delays[:5] == [0.0] * 5 and delays[5:] == pytest.approx([0.03, 0.03])
    assert w.active and Injector(spec, 1, 3, expected_steps=10).factor_at(9) == 1.0


def test_a_straggler_that_recovers_at_an_absolute_step():
    w = Injector(HeteroSpec(slowdown="1:4->1@3,2:2"), 1, 2)
    assert [w.factor_at(s) for s in (1, 2, 3, 4)] == [4.0, 4.0, 1.0, 1.0]
    assert Injector(HeteroSpec(slowdown="1:4->1@3,2:2"), 2, 2).factor_at(9) == 2.0


@pytest.mark.parametrize("text,match", [
    ("1:1->4", "A->B@STEP"), ("1:1->4@", "A->B@STEP"), ("1:1->0.5@3", ">= 1"), ("1:1->4@x", "neither a step"),
    ("1:1->4@0", ">= 1"), ("1:1->4@150%", "0%..100%"), ("1:1->4@3,1:2", "twice"), ("9:1->4@3", "not a worker"),
])
def test_bad_changing_slowdowns(text, match):
    with pytest.raises(InputError, match=match):
        parse_hetero(HeteroSpec(slowdown=text), 4)


def test_a_share_needs_the_step_count():
    with pytest.raises(InputError, match="absolute step"):
        Injector(HeteroSpec(slowdown="1:1->4@30%"), 1, 2)
