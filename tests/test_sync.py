"""Pure tests of the sync policies over the server's book (no MPI)."""
import math

import numpy as np
import pytest

from mpikanel.errors import InputError
from mpikanel.config import make_policy
from mpikanel.sync import ASP, BSP, ESP, SSP, Book


def simulate(policy, steps, seed, check=None):
    """Drive a book with random push orders: each worker pushes steps[w] times, the last flagged."""
    n = len(steps)
    rng = np.random.default_rng(seed)
    book = Book(n)
    clock = np.zeros(n, dtype=int)
    releases = []
    t = 0.0
    while not book.finished:
        ready = [w for w in range(n) if book.active[w] and not book.waiting[w]]
        if ready:
            w = int(rng.choice(ready))
            clock[w] += 1
            t += 1.0
            book.record_push(w, int(clock[w]), clock[w] == steps[w], 0.01, t)
            if check:
                check(book)
        released = policy.release(book)
        assert released == sorted(released)
        assert all(book.waiting[w] for w in released)
        if not ready:
            assert released, "deadlock: nobody can push and nobody is released"
        releases.append([(w, int(book.clock[w])) for w in released])
        for w in released:
            book.record_release(w)
    return releases


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_spread_at_most_s_plus_one(seed, s):
    steps = [12, 12, 12, 12, 12]

    def check(book):
        active = book.active
        assert book.clock[active].max() - book.clock[active].min() <= s + 1

    simulate(SSP(s), steps, seed, check)


@pytest.mark.parametrize("seed", range(20))
def test_bsp_all_or_none(seed):
    steps = [7] * 4
    for group in simulate(BSP(), steps, seed):
        if group:
            assert len(group) == 4
            assert len({c for _, c in group}) == 1


@pytest.mark.parametrize("policy", [BSP(), ASP(), SSP(0), SSP(2), SSP(math.inf), ESP(1, "inverse")])
@pytest.mark.parametrize("seed", range(10))
def test_uneven_step_counts_never_deadlock(policy, seed):
    # finished workers leave every barrier: workers with 3 steps must not block those with 11
    simulate(policy, [3, 11, 5, 11], seed)


def test_asp_releases_every_waiter_immediately():
    book = Book(3)
    book.record_push(1, 1, False, 0.0, 0.0)
    book.record_push(2, 5, False, 0.0, 0.0)
    assert ASP().release(book) == [1, 2]


def test_ssp_rule_exact():
    book = Book(3)
    book.clock[:] = [2, 5, 4]
    book.waiting[:] = [False, True, True]
    assert SSP(2).release(book) == [2]      # 5-2 > 2 holds worker 1; 4-2 <= 2 releases worker 2
    assert SSP(3).release(book) == [1, 2]
    book.active[0] = False                  # the slowest finished: floor rises to 4
    assert SSP(1).release(book) == [1, 2]


def test_bsp_applies_at_release_and_others_on_arrival():
    assert BSP().apply_on_arrival is False
    assert ASP().apply_on_arrival and SSP(1).apply_on_arrival


def test_make_policy_errors():
    assert isinstance(make_policy("ssp", 0), SSP)
    assert make_policy("esp", 2).name == "esp" and make_policy("psp", n_workers=3).name == "psp"
    with pytest.raises(InputError, match="unknown"):
        make_policy("nope")
    with pytest.raises(InputError):
        SSP(-1)


def test_book_rejects_double_push():
    book = Book(2)
    book.record_push(0, 1, False, 0.0, 0.0)
    with pytest.raises(RuntimeError):
        book.record_push(0, 2, False, 0.0, 0.0)


def test_esp_scales_stale_deltas_only_when_asked():
    book = Book(2)
    book.version = 5
    book.record_push(0, 1, False, 0.0, 0.0, base_version=2)
    assert ESP(3, "none").delta_scale(book, 0) == 1.0
    assert ESP(3, "inverse").delta_scale(book, 0) == pytest.approx(1 / 4)
    with pytest.raises(InputError):
        ESP(3, "bogus")
