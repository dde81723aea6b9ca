"""The rank watcher (mpikanel.comm.watch) without MPI: real sockets, a real watcher process."""
import json
import socket
import subprocess
import sys
import time

import pytest

from mpikanel.comm.node import node_ranks
from mpikanel.comm.watch import BYE, END, enabled, lost_line

NAMES = ["h0", "h1", "h0", "h1"]


def test_node_ranks_and_when_to_watch():
    assert node_ranks(NAMES) == {"h0": [0, 2], "h1": [1, 3]}
    assert enabled(NAMES, {}) and not enabled(["vm"] * 4, {})
    assert not enabled(NAMES, {"MPIKANEL_WATCH": "0"}) and enabled(["vm"] * 4, {"MPIKANEL_WATCH": "1"})


def test_lost_line_names_the_ranks_and_whether_the_host_lost_all():
    assert lost_line([3, 1], NAMES) == ("mpikanel: lost ranks 1, 3 on h1 (all its ranks): the processes ended "
                                        "mid-run; ending the job")
    assert lost_line([1], NAMES) == "mpikanel: lost rank 1 on h1: the process ended mid-run; ending the job"


def start_watcher(tmp_path):
    report = tmp_path / "lost"
    proc = subprocess.Popen([sys.executable, "-m", "mpikanel.comm.watch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"names": NAMES, "report": str(report)}))
    proc.stdin.close()
    port = int(proc.stdout.readline())
    socks = []
    for rank in range(len(NAMES)):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"{rank}\n".encode())
        socks.append(s)
    return proc, socks, report


def ended(proc) -> int:
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the watcher did not end")


@pytest.mark.parametrize("word", [BYE, END])
def test_a_run_that_ends_says_nothing(word, tmp_path):
    proc, socks, report = start_watcher(tmp_path)
    socks[2].sendall(word)                   # END: a failing run ends the job on purpose, nothing is lost
    for s in socks:
        if word == BYE:
            s.sendall(BYE)
        s.close()
    assert ended(proc) == 0 and not report.exists()


def test_the_first_lost_host_is_named_not_the_teardown_that_follows(tmp_path):
    proc, socks, report = start_watcher(tmp_path)
    socks[1].close()                         # h1's ranks end without a word ...
    socks[3].close()
    time.sleep(0.3)
    socks[0].close()                         # ... then the launcher tears h0 down
    socks[2].close()
    assert ended(proc) == 0
    assert report.read_text() == lost_line([1, 3], NAMES) + "\n"
