"""The lock two test stages share: shared tests run together, a test marked alone runs by itself and
is not starved by shared tests that keep starting."""
import fcntl
import threading
import time

from machine_lock import machine_lock


def _hold(path, alone, events, name, started=None, release=None):
    with machine_lock(str(path), alone):
        events.append(("start", name))
        if started is not None:
            started.set()
        if release is not None:
            release.wait(10)
        events.append(("end", name))


def _thread(*args, **kw):
    t = threading.Thread(target=_hold, args=args, kwargs=kw, daemon=True)
    t.start()
    return t


def test_shared_holders_run_together(tmp_path):
    events, release, a, b = [], threading.Event(), threading.Event(), threading.Event()
    ts = [_thread(tmp_path / "lock", False, events, n, started=s, release=release) for n, s in (("a", a), ("b", b))]
    assert a.wait(5) and b.wait(5)          # both inside at once
    release.set()
    for t in ts:
        t.join(5)
    assert [e for e, _ in events] == ["start", "start", "end", "end"]


def _held(path) -> bool:
    """Whether another holder has the lock file `path` (a probe that takes it when free, and lets go)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_an_alone_test_waits_for_the_running_one_and_new_ones_wait_for_it(tmp_path):
    path, events = tmp_path / "lock", []
    first_in, first_out = threading.Event(), threading.Event()
    first = _thread(path, False, events, "shared1", started=first_in, release=first_out)
    assert first_in.wait(5)
    alone = _thread(path, True, events, "alone")
    deadline = time.monotonic() + 10
    while not _held(str(path) + ".gate"):    # the alone test holds the gate, waiting at the lock
        assert time.monotonic() < deadline, "the alone test never took the gate"
        time.sleep(0.01)
    later = _thread(path, False, events, "shared2")
    time.sleep(0.2)
    assert events == [("start", "shared1")]  # neither the alone test nor a new shared one started
    first_out.set()
    for t in (first, alone, later):
        t.join(5)
    assert events == [("start", "shared1"), ("end", "shared1"), ("start", "alone"), ("end", "alone"),
                      ("start", "shared2"), ("end", "shared2")]
