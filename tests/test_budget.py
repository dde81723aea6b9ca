"""The shared work budget: leases by measured speed, exactly B samples, finish, time budget."""
import heapq

import numpy as np
import pytest

from mpikanel.engine.budget import UNLIMITED, Budget, total_samples


def simulate(step_s: list[float], total: int = 180_000, batch: int = 64, push_every: int = 1,
             time_s: float | None = None) -> tuple[list[int], list[float], Budget]:
    """Workers of fixed step times pushing every `push_every` steps against one Budget (virtual time)."""
    n = len(step_s)
    budget = Budget(n, total, batch, time_s)
    active = np.ones(n, dtype=bool)
    reported = np.zeros(n)
    allowance = [budget.initial_lease()] * n
    done, unsent, steps, finished_at = [0] * n, [0] * n, [0] * n, [0.0] * n
    events = [(step_s[w], w) for w in range(n)]
    while events:
        t, w = heapq.heappop(events)
        take = min(batch, allowance[w])
        done[w] += take
        unsent[w] += take
        allowance[w] -= take
        steps[w] += 1
        if steps[w] % push_every and allowance[w] > 0 and not budget.expired:
            heapq.heappush(events, (t + step_s[w], w))
            continue
        budget.on_push(w, unsent[w], t)
        reported[w] = step_s[w]
        unsent[w] = 0
        allowance[w] = budget.renew(w, reported, active)
        if budget.finish(w):
            active[w] = False
            budget.leave(w)
            finished_at[w] = t
            continue
        heapq.heappush(events, (t + step_s[w], w))
    return done, finished_at, budget


@pytest.mark.parametrize("push_every", [1, 4])
def test_cluster_processes_exactly_the_budget_split_by_speed(push_every):
    done, finished_at, _ = simulate([4.0, 1.0, 1.0, 1.0], push_every=push_every)
    assert sum(done) == 180_000
    # the 4x straggler does about a quarter of a fast worker's share; all end at about the same time
    fast = np.mean(done[1:])
    assert 0.2 < done[0] / fast < 0.3
    assert max(finished_at) - min(finished_at) <= 2 * 4.0 * push_every


def test_homogeneous_workers_split_evenly_and_leases_never_exceed_what_is_left():
    budget = Budget(3, 10_000, 64)
    assert budget.lease.sum() <= 10_000
    done, _, _ = simulate([1.0, 1.0, 1.0], total=10_000)
    assert sum(done) == 10_000 and max(done) - min(done) <= 2 * 64


def test_equal_shares_when_speeds_are_not_passed():
    """BSP passes no speeds: leases must not depend on timing (bitwise reproducibility)."""
    a, b = Budget(2, 1000, 10), Budget(2, 1000, 10)
    active = np.ones(2, dtype=bool)
    for budget, speeds in ((a, None), (b, None)):
        budget.on_push(0, 10, 0.0)
        budget.renew(0, speeds, active)
    assert a.lease.tolist() == b.lease.tolist()
    c = Budget(2, 1000, 10)
    c.on_push(0, 10, 0.0)
    c.renew(0, np.array([1.0, 100.0]), active)       # measured speeds do change the split
    assert c.lease[0] > a.lease[0]


def test_finish_only_when_lease_and_pool_are_empty():
    budget = Budget(2, 20, 10)
    active = np.ones(2, dtype=bool)
    assert budget.initial_lease() == 10
    budget.on_push(0, 10, 0.0)
    assert budget.renew(0, None, active) == 0 and budget.finish(0)
    budget.on_push(1, 10, 0.0)
    assert budget.renew(1, None, active) == 0 and budget.finish(1)
    assert budget.counted == 20


def test_overdrawn_lease_is_a_protocol_error():
    budget = Budget(2, 100, 10)
    with pytest.raises(RuntimeError, match="lease"):
        budget.on_push(0, budget.initial_lease() + 1, 0.0)


def test_time_budget_finishes_everyone_and_accepts_their_unsent_work():
    budget = Budget(2, None, 10, time_s=5.0)
    active = np.ones(2, dtype=bool)
    assert budget.initial_lease() == UNLIMITED
    budget.on_push(0, 30, 1.0)
    assert budget.renew(0, None, active) == UNLIMITED and not budget.finish(0)
    budget.on_push(1, 50, 6.0)                      # past the time budget
    assert budget.renew(1, None, active) == 0 and budget.finish(1)
    budget.on_push(0, 70, 6.5)                      # unsent work after the end is still counted
    assert budget.finish(0) and budget.counted == 150


def test_state_round_trip():
    budget = Budget(3, 1000, 10)
    budget.on_push(1, 20, 0.0)
    budget.renew(1, np.array([1.0, 2.0, 3.0]), np.ones(3, dtype=bool))
    again = Budget(3, 1000, 10)
    again.restore(budget.state())
    assert again.state() == budget.state()


def test_total_samples():
    assert total_samples(3, 81_000) == 243_000
