"""PSP: predictor and the sync-time sweep against brute force (pure, no MPI)."""
import itertools

import numpy as np
import pytest

from mpikanel.sync.psp import (PSP, PspSchedule, StepTimePredictor, arrival_ends, choose_sync_time, idle_of,
                               steps_for)
from mpikanel.sync import Action, Book, WorkerState


def brute_force(t, k_max, c, objective="idle"):
    """Every candidate end, every k by definition; the lowest objective, earliest T on ties."""
    t_min = max(ci + ti for ci, ti in zip(c, t))
    best = None
    for T in sorted({ci + k * ti for ci, ti in zip(c, t) for k in range(1, k_max + 1)}):
        if T < t_min - 1e-12:
            continue
        k = np.array([max(1, min(k_max, max(kk for kk in range(1, k_max + 1) if ci + kk * ti <= T + 1e-12)
                                 if ci + ti <= T + 1e-12 else 1)) for ci, ti in zip(c, t)])
        idle = float(np.sum(T - (np.array(c) + k * np.array(t))))
        # "rate": the idle share of the round plus 0.05 per slowest-first-step of extra length
        score = idle if objective == "idle" else idle / (len(t) * T) + 0.05 * (T - t_min) / t_min
        if best is None or score < best[3] - 1e-9:
            best = (T, k, idle, score)
    return best


PROFILES = [
    [1.0, 1.0, 1.0, 1.0],            # homogeneous
    [1.0, 1.0, 1.0, 4.0],            # one 4x straggler
    [1.0, 1.9],
    [0.7, 1.3, 2.9, 3.1, 5.0],
    [0.01, 0.013, 0.05],
]


@pytest.mark.parametrize("objective", ["idle", "rate"])
@pytest.mark.parametrize("t", PROFILES)
@pytest.mark.parametrize("k_max", [1, 3, 8])
def test_sweep_matches_brute_force(t, k_max, objective):
    c = [0.0] * len(t)
    plan = choose_sync_time(np.array(t), k_max, objective=objective)
    T, k, idle, score = brute_force(t, k_max, c, objective)
    assert plan.T == pytest.approx(T) and list(plan.k) == list(k) and plan.idle == pytest.approx(idle)
    assert plan.score == pytest.approx(score)


@pytest.mark.parametrize("objective", ["idle", "rate"])
@pytest.mark.parametrize("seed", range(30))
def test_sweep_matches_brute_force_random_with_offsets(seed, objective):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    t = rng.lognormal(0, 0.7, n)
    c = rng.uniform(0, 0.5, n)
    k_max = int(rng.integers(1, 9))
    plan = choose_sync_time(t, k_max, c, objective=objective)
    T, k, idle, _ = brute_force(list(t), k_max, list(c), objective)
    assert plan.T == pytest.approx(T) and list(plan.k) == list(k) and plan.idle == pytest.approx(idle)
    assert list(steps_for(plan.T, t, k_max, c)) == list(plan.k)


def test_sweep_at_ten_thousand_workers_matches_brute_force_on_a_sample():
    rng = np.random.default_rng(7)
    n, k_max = 10_000, 8
    t = rng.lognormal(0, 0.5, n)
    c = rng.uniform(0, 0.2, n)
    plan = choose_sync_time(t, k_max, c)
    t_min = float((c + t).max())
    # the chosen T's objective, recomputed by definition, is no worse than any sampled candidate's
    def score(T):
        k = steps_for(T, t, k_max, c)
        return float(np.sum(T - (c + k * t))) / (n * T) + 0.05 * (T - t_min) / t_min
    assert score(plan.T) == pytest.approx(plan.score)
    ends = (c[:, None] + np.arange(1, k_max + 1)[None, :] * t[:, None]).ravel()
    sample = rng.choice(ends[ends >= t_min], 500, replace=False)
    assert all(score(plan.T) <= score(T) + 1e-12 for T in sample)


def test_the_rate_objective_keeps_rounds_short_where_idle_fills_k_max():
    # fast workers 1 s/step, a 3.3 s straggler: idle alone prefers the long round that fits best
    t = np.array([1.0, 1.0, 1.0, 3.3])
    long = choose_sync_time(t, 8, objective="idle")
    short = choose_sync_time(t, 8, objective="rate")
    assert list(long.k) == [7, 7, 7, 2] and list(short.k) == [4, 4, 4, 1]


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
    # play_rounds' workers idle while their push waits: the ZipLine-style wait
    plans = play_rounds(PSP(4, k_max=8, train_while_waiting=False), [0.01, 0.01, 0.01, 0.04], rounds=6)
    assert list(plans[-1]) == [4, 4, 4, 1]
    plans = play_rounds(PSP(3, k_max=8), [0.02, 0.02, 0.02], rounds=6)
    assert all(list(p) == [1, 1, 1] for p in plans)


def test_psp_normalized_aggregation_divides_by_steps():
    book = Book(2)
    book.record_push(0, 1, False, 0.1, 0.0, steps=4)
    assert PSP(2, aggregate="normalized").delta_scale(book, 0) == pytest.approx(0.25)
    assert PSP(2, aggregate="sum").delta_scale(book, 0) == 1.0


def test_per_worker_offsets_predict_each_workers_arrival():
    p = StepTimePredictor(3, window=5)
    for w, (t, c) in enumerate([(0.01, 0.002), (0.01, 0.030), (0.04, 0.002)]):   # worker 1: a slow link
        for _ in range(5):
            p.observe(w, t)
            p.observe_round(w, c + 2 * t, 2)
    assert p.offsets() == pytest.approx([0.002, 0.030, 0.002])
    policy = PSP(3, k_max=8)
    policy.predictor = p
    plan, fallback = policy.choose(p.predict(), p.offsets())
    assert not fallback
    # the slow-link worker's 30 ms arrive on top of its steps: it is planned fewer steps
    assert plan.k[1] < plan.k[0]


def test_done_pushes_and_lone_worker_rounds_are_not_scored():
    policy = PSP(2, k_max=8)
    book = Book(2)
    for w in range(2):
        book.record_push(w, 1, False, 0.01, 0.01, steps=1)
        policy.on_push(book, w)
    policy.release(book)
    for w in range(2):
        book.record_release(w)
    book.record_push(0, 2, True, 0.01, 5.0, steps=1)       # worker 0's DONE push, very late
    policy.on_push(book, 0)
    book.record_push(1, 2, False, 0.01, 0.02, steps=1)
    policy.on_push(book, 1)
    r = policy.rounds[-1]
    assert np.isnan(r.arrived[0]) and not np.isnan(r.arrived[1])
    assert r.errors().size == 0 and np.isnan(r.relative_error())   # one scored worker: no score


def test_the_critical_worker_is_flagged_and_pushes_on_plan_and_blocks():
    plans = play_rounds(PSP(4, k_max=8, train_while_waiting=False), [0.01, 0.01, 0.01, 0.04], rounds=6)
    assert list(plans[-1]) == [4, 4, 4, 1]
    policy = PSP(4, k_max=8)
    play_rounds(policy, [0.01, 0.01, 0.01, 0.04], rounds=6)
    book = Book(4)
    assert policy.critical(book, 3) and not policy.critical(book, 0)
    sch = PspSchedule(max_wait_steps=8)
    # the critical worker: after its planned step it pushes and blocks (no overrun of the round)
    assert sch.decide(WorkerState(plan=1, steps_since_reply=1, critical=True)) == Action.PUSH_AND_WAIT
    # a fast worker pushes without blocking and trains on while the round closes
    assert sch.decide(WorkerState(plan=4, steps_since_reply=4)) == Action.PUSH


def test_steps_trained_while_pending_count_toward_the_next_plan():
    sch = PspSchedule(max_wait_steps=8)
    # 3 steps while its push was pending, then the reply (plan 4): one more step, then push
    st = WorkerState(plan=4, steps_while_pending=3, steps_since_reply=0)
    assert sch.decide(st) == Action.CONTINUE
    st.steps_since_reply = 1
    assert sch.decide(st) == Action.PUSH


def test_fallback_retries_the_plan_every_few_rounds():
    policy = PSP(2, k_max=8, fallback_error=0.5, retry_every=4)
    policy.in_fallback = lambda: True                       # predictions stay bad
    t = np.array([0.01, 0.04])
    fell = [policy.choose(t, np.zeros(2))[1] for _ in range(8)]
    assert fell == [True, True, True, False, True, True, True, False]


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


def test_arrival_ends_of_a_worker_that_trains_while_its_push_waits():
    t = np.array([1.0, 1.0, 1.0, 1.0])
    ahead = np.array([0.0, 2.5, 1.0, 3.0])     # its push arrived this long before the release
    lim = np.array([0, 4, 4, 2])               # steps it may train while waiting (0: it blocked)
    e = arrival_ends(t, 4, 0.1, ahead, lim)
    assert e[0] == pytest.approx([1.1, 2.1, 3.1, 4.1])        # blocked: k steps after the reply
    assert e[1] == pytest.approx([0.6, 0.6, 0.6, 1.6])        # in its 3rd step: ends it, then pushes
    assert e[2] == pytest.approx([0.1, 1.1, 2.1, 3.1])        # 1 step done right at the release
    assert e[3] == pytest.approx([0.1, 0.1, 1.1, 2.1])        # stopped after 2: resumes at the reply
    # with nothing ahead the ends are the plain c + k t
    assert arrival_ends(t, 3, 0.1) == pytest.approx(0.1 + np.arange(1, 4) * np.ones((4, 1)))


def test_a_lease_shorter_than_the_plan_is_predicted_and_stops_training_while_waiting():
    policy = PSP(2, k_max=8)
    book = Book(2)
    for w, t in enumerate([0.01, 0.04]):
        book.record_push(w, 1, False, t, t, steps=1)
        policy.on_push(book, w)
    policy.release(book)
    r = policy.rounds[-1]
    k = int(r.k[0])
    assert k > 2
    before = float(r.predicted[0])
    policy.granted(book, 0, 2)                 # its lease covers 2 of its k steps
    assert r.steps[0] == 2 and r.predicted[0] < before
    policy.granted(book, 1, 100)               # plenty: nothing changes
    assert r.steps[1] == r.k[1]
    for w in range(2):
        book.record_release(w)
        book.record_push(w, 2, False, [0.01, 0.04][w], 0.1 + 0.03 * w, steps=int(r.steps[w]))
        policy.on_push(book, w)
    policy.release(book)
    # worker 0 used up its lease with its push: it waited, it did not train on
    assert policy.rounds[-1].lim[0] == 0 and policy.rounds[-1].lim[1] == 0   # 1 was critical: blocked
