"""Flow control of large pushes (pure): when it is on, and which ask gets which frame."""
import pytest

from mpikanel.engine.flow import FLOW_MIN_BYTES, POOL_START, Grants, flow_controlled


def test_auto_is_on_for_large_dense_frames_with_more_workers_than_the_pool():
    big, workers = FLOW_MIN_BYTES, POOL_START + 1
    assert flow_controlled("auto", "dense", big, workers)
    assert not flow_controlled("auto", "dense", big - 1, workers)          # small frames: no round trip
    assert not flow_controlled("auto", "dense", big, POOL_START)           # the pool takes every push
    assert not flow_controlled("auto", "auto", 100 * big, workers)         # sparse frames: what was touched
    assert flow_controlled("on", "sparse", 8, 1) and not flow_controlled("off", "dense", 100 * big, 64)
    with pytest.raises(ValueError, match="flow control 'yes'"):
        flow_controlled("yes", "dense", big, workers)


def test_asks_get_free_frames_oldest_first_and_wait_for_released_ones():
    g = Grants(frames=2, limit=8)
    for w in (5, 3, 7):
        g.asked(w)
    assert g.grant(grow=False) == [(5, 0), (3, 1)]
    assert g.grant(grow=True) == []             # pushes are granted and may land: no growth
    g.landed()
    g.released(0)                               # worker 5's push was used up (ASP)
    assert g.grant(grow=False) == [(7, 0)]
    assert g.frames == 2


def test_the_pool_grows_only_when_nothing_could_land_otherwise():
    g = Grants(frames=1, limit=3)
    for w in range(3):
        g.asked(w)
    assert g.grant(grow=True) == [(0, 0)]
    g.landed()                                  # held (BSP: until the round is complete)
    assert g.grant(grow=False) == []            # not while the server still handles what landed
    assert g.grant(grow=True) == [(1, 1)] and g.frames == 2
    assert g.grant(grow=True) == []             # worker 1's push may still land
    g.landed()
    assert g.grant(grow=True) == [(2, 2)]
    g.landed()
    g.asked(2)                                  # (a worker past its limit: never more than one per worker)
    assert g.grant(grow=True) == [] and g.frames == 3
    g.released(1)
    assert g.grant(grow=False) == [(2, 1)]


def test_a_server_polls_right_after_a_go_and_only_while_a_granted_push_is_out():
    from mpikanel.engine.flow import GRANTED_POLL_S, polls_for_granted
    assert polls_for_granted(1, 0.0) and polls_for_granted(3, GRANTED_POLL_S / 2)
    assert not polls_for_granted(0, 0.0)                    # nothing granted: the forecast decides
    assert not polls_for_granted(1, 2 * GRANTED_POLL_S)     # a worker slow to push: back to the backoff
