"""PSP: predictor and the sync-time sweep against brute force (pure, no MPI)."""
import itertools

import numpy as np
import pytest

from mpikanel.sync.psp import PSP, StepTimePredictor, choose_sync_time, idle_of, steps_for
from mpikanel.sync import Book


def brute_force(t, k_max, c):
    """Every candidate end, every k by definition; minimal idle, earliest T on ties."""
    t_min = max(ci + ti for ci, ti in zip(c, t))
    best = None
    for T in sorted({ci + k * ti for ci, ti in zip(c, t) for k in range(1, k_max + 1)}):
        if T < t_min - 1e-12:
            continue
        k = np.array([max(1, min(k_max, max(kk for kk in range(1, k_max + 1) if ci + kk * ti <= T + 1e-12)
                                 if ci + ti <= T + 1e-12 else 1)) for ci, ti in zip(c, t)])
        idle = float(np.sum(T - (np.array(c) + k * np.array(t))))
        if best is None or idle < best[2] - 1e-9:
            best = (T, k, idle)
    return best


PROFILES = [
    [1.0, 1.0, 1.0, 1.0],            # homogeneous
    [1.0, 1.0, 1.0, 4.0],            # one 4x straggler
    [1.0, 1.9],
    [0.7, 1.3, 2.9, 3.1, 5.0],
    [0.01, 0.013, 0.05],
]


@pytest.mark.parametrize("t", PROFILES)
@pytest.mark.parametrize("k_max", [1, 3, 8])
def test_sweep_matches_brute_force(t, k_max):
    c = [0.0] * len(t)
    plan = choose_sync_time(np.array(t), k_max)
    T, k, idle = brute_force(t, k_max, c)
    assert plan.T == pytest.approx(T) and list(plan.k) == list(k) and plan.idle == pytest.approx(idle)


@pytest.mark.parametrize("seed", range(30))
def test_sweep_matches_brute_force_random_with_offsets(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    t = rng.lognormal(0, 0.7, n)
    c = rng.uniform(0, 0.5, n)
    k_max = int(rng.integers(1, 9))
    plan = choose_sync_time(t, k_max, c)
    T, k, idle = brute_force(list(t), k_max, list(c))
    assert plan.T == pytest.approx(T) and list(plan.k) == list(k) and plan.idle == pytest.approx(idle)
    assert list(steps_for(plan.T, t, k_max, c)) == list(plan.k)


@pytest.mark.parametrize("t", PROFILES)
def test_plan_never_idles_more_than_bsp(t):
    t = np.array(t)
    plan = choose_sync_time(t, 8)
    bsp_idle = idle_of(float(t.max()), t, np.ones(len(t), dtype=int))
    assert plan.idle <= bsp_idle + 1e-12


def test_straggler_gives_fast_workers_more_steps_and_homogeneous_is_bsp():
    plan = choose_sync_time(np.array([1.0, 1.0, 1.0, 4.0]), 8)
    assert list(plan.k) == [4, 4, 4, 1] and plan.idle == pytest.approx(0)
    plan = choose_sync_time(np.array([1.0, 1.0, 1.0]), 8)
    assert list(plan.k) == [1, 1, 1]


def test_predictor_is_robust_to_an_outlier_and_warmup():
    p = StepTimePredictor(2, window=5)
    for x in [5.0, 1.0, 1.0, 1.0, 1.0]:          # first step slow (warm-up)
        p.observe(0, x)
    p.observe(0, 1.0)
    p.observe(0, 50.0)                            # a pause
    assert p.predict()[0] == pytest.approx(1.0)
    assert p.predict()[1] == pytest.approx(1.0)   # no report yet: the others' mean


def play_rounds(policy, step_times, rounds):
    """Drive PSP with workers whose true step times are fixed; returns the plans."""
    n = len(step_times)
    book = Book(n)
    clock = np.zeros(n, dtype=int)
    now = 0.0
    plans = []
    k = np.ones(n, dtype=int)
    for _ in range(rounds):
        arrivals = now + k * np.array(step_times)
        for w in np.argsort(arrivals):
            clock[w] += 1
            book.record_push(int(w), int(clock[w]), False, step_times[w], float(arrivals[w]), steps=int(k[w]))
            policy.on_push(book, int(w))
            released = policy.release(book)
        assert released == list(range(n))
        k = np.array([policy.plan(book, w) for w in range(n)])
        plans.append(k.copy())
        for w in released:
            book.record_release(w)
        now = float(arrivals.max())
    return plans


def test_psp_policy_plans_from_observed_times():
    plans = play_rounds(PSP(4, k_max=8), [0.01, 0.01, 0.01, 0.04], rounds=6)
    assert list(plans[-1]) == [4, 4, 4, 1]
    plans = play_rounds(PSP(3, k_max=8), [0.02, 0.02, 0.02], rounds=6)
    assert all(list(p) == [1, 1, 1] for p in plans)


def test_psp_normalized_aggregation_divides_by_steps():
    book = Book(2)
    book.record_push(0, 1, False, 0.1, 0.0, steps=4)
    assert PSP(2, aggregate="normalized").delta_scale(book, 0) == pytest.approx(0.25)
    assert PSP(2, aggregate="sum").delta_scale(book, 0) == 1.0


def test_psp_falls_back_to_bsp_when_predictions_are_wrong():
    policy = PSP(2, k_max=8, fallback_error=0.5)
    n = 2
    book = Book(n)
    rng = np.random.default_rng(0)
    for r in range(1, 8):
        true = rng.choice([0.01, 0.1], size=n)     # erratic: reports say nothing about the next round
        for w in range(n):
            book.record_push(w, r, False, float(rng.choice([0.01, 0.1])), float(r + true[w] * 10), steps=1)
            policy.on_push(book, w)
        policy.release(book)
        for w in range(n):
            book.record_release(w)
    assert policy.report()["fallback_rounds"] > 0
