"""The server core alone: pushes in, answers out, no transport."""
import numpy as np

from mpikanel.engine.budget import Budget
from mpikanel.engine.messages import Flag
from mpikanel.engine.server_core import Push, ServerCore
from mpikanel.config import make_policy


def core(sync: str, n: int = 2, total: int | None = 4000) -> ServerCore:
    return ServerCore(np.zeros(3), make_policy(sync, n_workers=n), n, Budget(n, total, 10))


def answers_at(c: ServerCore, now: float) -> list:
    return [send.answer for send in c.on_tick(now).replies]


def push(w: int, clock: int, step_s: float, samples: int = 10, last: bool = False) -> Push:
    return Push(w, clock, 1, samples, 0, step_s, last=last, delta=np.full(3, float(w + 1)))


def test_bsp_answers_everyone_in_rank_order_with_equal_leases_whatever_the_speeds():
    c = core("bsp")
    c.on_push(push(1, 1, step_s=0.001), 0.0)
    assert answers_at(c, 0.0) == []                   # the barrier holds the first arrival
    c.on_push(push(0, 1, step_s=0.004), 0.1)
    answers = answers_at(c, 0.1)
    assert [a.w for a in answers] == [0, 1]
    assert answers[0].lease == answers[1].lease   # lockstep: measured speeds must not matter
    assert c.params.tolist() == [3.0, 3.0, 3.0] and answers[0].held_s == 0.0 and answers[1].held_s == 0.1


def test_asp_leases_follow_measured_speed():
    c = core("asp")
    c.on_push(push(0, 1, step_s=0.004), 0.0)
    c.on_push(push(1, 1, step_s=0.001), 0.0)
    slow, fast = (a.lease for a in answers_at(c, 0.0))
    assert fast > slow


def test_finish_and_leave():
    c = core("asp", total=40)
    c.on_push(push(0, 1, 0.001, samples=10), 0.0)
    c.on_push(push(1, 1, 0.001, samples=10), 0.0)
    answers = answers_at(c, 0.0)
    assert all(a.lease == 10 and not a.flags & Flag.FINISH for a in answers)
    c.on_push(push(0, 2, 0.001, samples=10), 0.1)
    c.on_push(push(1, 2, 0.001, samples=10), 0.1)
    answers = answers_at(c, 0.1)
    assert all(a.lease == 0 and a.flags & Flag.FINISH for a in answers)
    for w in (0, 1):
        c.on_push(push(w, 3, 0.001, samples=0, last=True), 0.2)
    answers_at(c, 0.2)
    assert c.done and c.stats.samples.sum() == 40
