"""The waiting server's pauses: the backoff, and the window of each worker's next push (pure, no MPI)."""
import pytest

from mpikanel.engine.arrivals import (BACKOFF, BACKOFF_SPARE_CORES, PAUSE_MAX_S, PAUSE_MIN_S,
                                      WINDOW_MAX_FRACTION, WINDOW_MIN_S, ArrivalForecast, backoff_for,
                                      pause_after)

STEP = 0.024


def steady(n_workers: int = 1, steps: int = 3, step: float = STEP) -> tuple[ArrivalForecast, float]:
    """A forecast that saw worker 0 push `step` after each reply; the last reply sent at the time returned."""
    f = ArrivalForecast(n_workers)
    t = 0.0
    for _ in range(steps):
        f.replied(0, t)
        t += step
        f.arrived(0, t)
    f.replied(0, t)
    return f, t


def test_the_backoff_is_a_tenth_of_the_wait_within_its_bounds():
    assert pause_after(0.0) == PAUSE_MIN_S
    assert pause_after(0.01) == pytest.approx(0.001)
    assert pause_after(10.0) == PAUSE_MAX_S


def test_without_a_learnt_interval_the_pause_is_the_backoff():
    f = ArrivalForecast(2)
    f.replied(0, 0.0)                   # no push seen yet: nothing is due
    for waited in (0.0, 0.003, 0.02, 1.0):
        assert f.pause(waited, waited) == pause_after(waited)
    assert f.window(0) is None and f.window(1) is None


def test_a_steady_worker_is_polled_at_the_shortest_pause_around_its_due_push():
    f, t = steady()
    opens, closes = f.window(0)
    assert opens == pytest.approx(t + STEP - WINDOW_MIN_S) and closes == pytest.approx(t + STEP + WINDOW_MIN_S)
    assert f.pause(t + STEP, STEP) == PAUSE_MIN_S
    assert f.pause(opens + 1e-6, STEP) == PAUSE_MIN_S


def test_before_the_window_no_sleep_runs_past_its_opening_nor_past_the_backoff():
    f, t = steady()
    opens, _ = f.window(0)
    for waited in (0.001, 0.01, 0.02, 0.0235):
        now = t + waited
        p = f.pause(now, waited)
        assert p <= pause_after(waited)
        assert now + p <= opens + 1e-12 or p == PAUSE_MIN_S
    assert f.pause(t + 0.02, 0.02) == pytest.approx(pause_after(0.02))     # far from it: the backoff
    assert f.pause(opens - 3e-4, STEP) == pytest.approx(3e-4)                # cut short at the opening


def test_a_closed_window_and_a_push_that_landed_are_ignored():
    f, t = steady()
    _, closes = f.window(0)
    late = closes + 0.05
    assert f.pause(late, late - t) == pause_after(late - t)
    f.arrived(0, t + STEP)
    assert f.window(0) is None
    assert f.pause(t + STEP, STEP) == pause_after(STEP)


def test_the_window_widens_with_the_intervals_spread_and_an_unpredictable_worker_gets_none():
    def learnt(steps):
        f, t = ArrivalForecast(1), 0.0
        for step in steps:
            f.replied(0, t)
            t += step
            f.arrived(0, t)
        f.replied(0, t)
        return f, t

    f, t = learnt([0.0240, 0.0244] * 3)          # 0.4 ms of jitter: a window wider than the least
    opens, closes = f.window(0)
    assert 2 * WINDOW_MIN_S < closes - opens <= WINDOW_MAX_FRACTION * (closes + opens - 2 * t) / 2
    f, t = learnt([0.020, 0.028] * 3)            # 4 ms of 24: too wide to poll through
    assert f.window(0) is None
    assert f.pause(t + 0.024, 0.024) == pause_after(0.024)


def test_the_earliest_window_among_workers_decides():
    f = ArrivalForecast(3)
    for w, step in ((0, 0.030), (1, 0.010)):
        f.replied(w, 0.0)
        f.arrived(w, step)
        f.replied(w, 1.0)
    assert f.pause(1.0 + 0.010, 0.010) == PAUSE_MIN_S        # worker 1's push is due
    assert f.pause(1.0 + 0.030, 0.030) == PAUSE_MIN_S        # then worker 0's
    assert f.pause(1.0 + 0.020, 0.020) == pytest.approx(pause_after(0.020))


def test_a_node_with_a_core_for_every_rank_backs_off_ten_times_gentler():
    assert backoff_for(2, 2) == BACKOFF_SPARE_CORES == BACKOFF / 10
    assert backoff_for(3, 2) == BACKOFF
    f = ArrivalForecast(1, backoff_for(2, 16))
    assert f.pause(0.02, 0.02) == pytest.approx(2e-4)       # a hundredth of 20 ms, not a tenth
    assert ArrivalForecast(1).pause(0.02, 0.02) == pytest.approx(2e-3)
