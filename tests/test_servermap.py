"""ServerMap (key ranges per server rank) and FollowerCore (replaying server 0's ops), without MPI."""
import numpy as np
import pytest

from mpikanel.engine.messages import Op, bits_scale, scale_bits
from mpikanel.engine.follower_core import FollowerCore
from mpikanel.errors import InputError
from mpikanel.engine.servermap import ServerMap


@pytest.mark.parametrize("n,k", [(10, 1), (10, 3), (7, 7), (1010, 4), (5, 2)])
def test_ranges_tile_the_parameters_evenly_and_owner_agrees(n, k):
    m = ServerMap(n, k)
    sizes = [m.range(i).stop - m.range(i).start for i in range(k)]
    assert m.range(0).start == 0 and m.range(k - 1).stop == n and sum(sizes) == n
    assert max(sizes) - min(sizes) <= 1 and sizes[0] == max(sizes) and min(sizes) >= 1
    for key in range(n):
        r = m.range(m.owner(key))
        assert r.start <= key < r.stop
    assert m.first_worker() == k


def test_bad_server_counts_are_clear_errors():
    with pytest.raises(InputError, match="must be >= 1"):
        ServerMap(10, 0)
    with pytest.raises(InputError, match="only 3 parameters"):
        ServerMap(3, 4)
    with pytest.raises(IndexError):
        ServerMap(10, 2).owner(10)


def ops(*items):
    buf = np.zeros(1 + 3 * len(items), dtype=np.int64)
    buf[0] = len(items)
    buf[1:] = np.asarray(items, dtype=np.int64).ravel()
    return buf


def test_follower_waits_for_the_push_an_op_is_about_and_never_reorders():
    f = FollowerCore(np.zeros(2), n_workers=2)
    f.add_ops(ops((Op.APPLY, 1, scale_bits(1.0)), (Op.APPLY, 0, scale_bits(1.0)),
                  (Op.REPLY, 1, 1), (Op.REPLY, 0, 0), (Op.SLICE, 0, 0)))
    f.push_arrived(0)
    assert f.next() is None                 # worker 1's push is not here: worker 0's apply waits too
    f.push_arrived(1)
    got = []
    while (a := f.next()) is not None:
        got.append((a.op, a.w))
    assert got == [(Op.APPLY, 1), (Op.APPLY, 0), (Op.REPLY, 1), (Op.REPLY, 0), (Op.SLICE, 0)]
    assert not f.arrived.any()              # each reply consumed its push
    f.add_ops(ops((Op.APPLY, 0, scale_bits(1.0))))
    assert f.next() is None                 # the next push of worker 0 is a new one
    f.add_ops(ops((Op.END, 0, 0)))
    f.push_arrived(0)
    assert f.next().op is Op.APPLY and f.next().op is Op.END and f.ended


def test_follower_applies_scaled_deltas_and_keeps_the_rest():
    f = FollowerCore(np.zeros(3), n_workers=1)
    f.apply(np.array([1.0, 2.0, 4.0]), 0.25)
    f.apply(np.array([1.0, 1.0, 1.0]), 1.0)
    assert f.params.tolist() == [1.25, 1.5, 2.0]
    assert f.unapplied.tolist() == [0.75, 1.5, 3.0]
    assert f.version == 2
    for x in (1.0, 0.25, 1 / 3, 1e-300):
        assert bits_scale(scale_bits(x)) == x
