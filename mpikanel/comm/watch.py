"""A watcher process outside MPI sees every rank's process end, so a lost host is named in one line.

When every rank of one host dies (the host crashed, lost its network, or its ranks were killed),
the MPI tears the job down, and what it prints depends on the MPI (Intel MPI: a block per rank;
Open MPI: the first rank only, or a "Socket closed" abort of a survivor). Here rank 0 starts a
small watcher process (``python -m mpikanel.comm.watch``, its own session: neither an MPI error
nor the launcher's teardown of the ranks ends it first); every rank keeps one TCP connection to
it from start-up to the end of the run and says ``bye`` on it (``end`` when the run fails on
purpose: the job is ending, nothing is lost). The kernel closes the connection of a process that
dies, so the watcher sees an end without a word within milliseconds. The first such rank's host
is the lost one: the watcher gathers that host's ranks that end with it (until all have, or
SETTLE_S), ignores ranks of other hosts (the teardown that follows), and says one line naming
them. The launcher ends the job as it does for any lost rank.

On by default when the job spans more than one node (processor names); ``MPIKANEL_WATCH=0``
turns it off, ``=1`` on also on one node. Rank 0's choice holds for all. The line goes to
``$MPIKANEL_WATCH_REPORT`` when set (scripts/multihost.sh prints it after the job: what reaches
the launcher's output while it tears the job down may be lost), else to standard error. Every wait
is bounded: a rank that cannot connect within CONNECT_S says so once and runs unwatched.
"""
from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import time
from typing import Any

#: environment switch: 0 off, 1 on; unset: on when the ranks run on more than one node
ENV = "MPIKANEL_WATCH"
#: a file the lost-ranks line goes to instead of standard error
REPORT_ENV = "MPIKANEL_WATCH_REPORT"
#: after the first lost rank, how long at most the watcher gathers the others of its host
SETTLE_S = 0.1
#: how long ranks try to connect, and the watcher waits for all of them
CONNECT_S = 10.0
BYE = b"bye\n"
END = b"end\n"


def enabled(names: list[str], env: dict[str, str] | None = None) -> bool:
    """Whether to watch: MPIKANEL_WATCH=0/1 decides, else whether the ranks span several nodes."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    return value == "1" if value in ("0", "1") else len(set(names)) > 1


def lost_line(lost: list[int], names: list[str]) -> str:
    """The one line that names the lost ranks and their host (saying so when it lost all its ranks)."""
    host = names[lost[0]]
    whole = " (all its ranks)" if len(lost) == names.count(host) else ""
    many = len(lost) > 1
    return (f"mpikanel: lost rank{'s' if many else ''} {', '.join(map(str, sorted(lost)))} on {host}{whole}: "
            f"the process{'es' if many else ''} ended mid-run; ending the job")


class Watch:
    """This rank's connection to the watcher; close() at the end of the run (a no-op where not watching)."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self._sock = sock

    def close(self, ending: bool = False) -> None:
        """Say bye (`ending`: the run fails and ends the job on purpose) and disconnect."""
        if self._sock is None:
            return
        try:
            self._sock.sendall(END if ending else BYE)
        except OSError:
            pass
        self._sock.close()
        self._sock = None


def watch_ranks(comm: Any, names: list[str]) -> Watch:
    """Connect every rank to a watcher rank 0 starts (collective over `comm`); `names`: processor names."""
    rank = comm.Get_rank()
    where = None
    if rank == 0 and enabled(names) and comm.Get_size() > 1:
        where = _start_watcher(names)
    where = comm.bcast(where, root=0)
    if where is None:
        return Watch()
    port, addresses = where
    targets = ["127.0.0.1"] if names[rank] == names[0] else addresses
    return Watch(_connect(targets, port, rank))


def _start_watcher(names: list[str]) -> tuple[int, list[str]] | None:
    """Start the watcher process; its port and the addresses it may be reached at, or None (said once)."""
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mpikanel.comm.watch"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, start_new_session=True, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"names": names, "report": os.environ.get(REPORT_ENV)}))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        line = proc.stdout.readline() if sel.select(timeout=CONNECT_S) else ""
        sel.close()
        return int(line), _addresses()
    except (OSError, ValueError) as exc:
        if proc is not None:
            proc.kill()
        print(f"mpikanel: cannot start the rank watcher ({exc or 'no port'}); lost ranks are left to the "
              "launcher to report", file=sys.stderr, flush=True)
        return None


def _addresses() -> list[str]:
    """This host's addresses other hosts may reach: its hostname's non-loopback ones, then the name."""
    host = socket.gethostname()
    try:
        found = {ai[4][0] for ai in socket.getaddrinfo(host, None, socket.AF_INET)}
    except OSError:
        found = set()
    return sorted(a for a in found if not a.startswith("127.")) + [host]


def _connect(targets: list[str], port: int, rank: int) -> socket.socket | None:
    """A connection to the watcher that has announced this rank, or None (said once) within CONNECT_S."""
    deadline = time.monotonic() + CONNECT_S
    error: Exception | None = None
    while time.monotonic() < deadline:
        for host in targets:
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                sock.settimeout(None)
                sock.sendall(f"{rank}\n".encode())
                return sock
            except OSError as exc:
                error = exc
        time.sleep(0.1)
    print(f"mpikanel: rank {rank} cannot reach the rank watcher ({', '.join(targets)}:{port}: {error}); "
          "this rank is not watched", file=sys.stderr, flush=True)
    return None


def watcher(names: list[str], report: str | None, out=sys.stdout) -> None:
    """The watcher process: accept every rank, say which ranks of the first lost host ended without a word."""
    server = socket.create_server(("", 0), backlog=len(names))
    print(server.getsockname()[1], file=out, flush=True)
    sel = selectors.DefaultSelector()
    server.setblocking(False)
    sel.register(server, selectors.EVENT_READ)
    received: dict[socket.socket, bytes] = {}
    lost: list[int] = []
    first_lost = 0.0
    accept_until = time.monotonic() + CONNECT_S
    while True:
        if server.fileno() >= 0 and (len(received) >= len(names) or time.monotonic() > accept_until):
            sel.unregister(server)
            server.close()
        if server.fileno() < 0 and len(sel.get_map()) == 0:
            return                                 # every rank said bye or ended
        for key, _ in sel.select(timeout=0.005 if lost else 0.5):
            conn = key.fileobj
            if conn is server:
                conn, _ = server.accept()
                conn.setblocking(False)
                received[conn] = b""
                sel.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = conn.recv(64)
            except OSError:
                data = b""
            received[conn] += data
            if END in received[conn]:
                return                             # a rank ends the job on purpose: nothing is lost
            if data and BYE not in received[conn]:
                continue
            sel.unregister(conn)
            conn.close()
            head, newline, _ = received[conn].partition(b"\n")
            if not data and newline:
                rank = int(head)
                if not lost or names[rank] == names[lost[0]]:
                    lost.append(rank)
                    first_lost = first_lost or time.monotonic()
        if lost and (time.monotonic() - first_lost >= SETTLE_S or len(lost) == names.count(names[lost[0]])):
            _say(lost_line(lost, names), report)
            return


def _say(line: str, report: str | None) -> None:
    """The lost-ranks line: to the report file if given, else to standard error."""
    if report:
        with open(report, "a") as fh:
            fh.write(line + "\n")
    else:
        print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    spec = json.loads(sys.stdin.read())
    watcher(spec["names"], spec.get("report"))
