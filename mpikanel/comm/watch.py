"""Rank 0 watches the other ranks' processes over plain TCP, so a lost host is named in one line.

When every rank of one host dies (the host crashed, lost its network, or its ranks were killed),
the MPI launcher tears the job down, but what it prints depends on the MPI (Intel MPI: a block
per rank; Open MPI: the first rank only; on one host also the ranks it killed itself). Here each
rank keeps one TCP connection to rank 0 from start-up to the end of the run and says ``bye`` on
it when its run ends; the kernel closes the connection of a process that dies, so rank 0 sees an
end without ``bye`` within milliseconds, gathers the ranks lost with it for SETTLE_S, prints one
line naming them and their hosts, and aborts the job (the launcher would too, a little later).

On by default when the job spans more than one node (processor names); ``MPIKANEL_WATCH=0``
turns it off, ``=1`` on also on one node. Rank 0's choice holds for all. A rank that cannot reach
rank 0's port within CONNECT_S says so once and runs unwatched; nothing here waits unbounded.
"""
from __future__ import annotations

import os
import selectors
import socket
import sys
import threading
import time
from typing import Any

#: environment switch: 0 off, 1 on; unset: on when the ranks run on more than one node
ENV = "MPIKANEL_WATCH"
#: after the first lost rank, how long at most rank 0 gathers others lost with it before it says so
#: (less once every rank of the hosts seen losing one is lost: the launcher tears the job down
#: tens of milliseconds after a loss, and a dying process closes its socket only after freeing its memory)
SETTLE_S = 0.1
#: how long a rank tries to connect to rank 0, and rank 0 waits for all connections
CONNECT_S = 10.0
BYE = b"bye\n"
#: a file the lost-ranks line goes to instead of standard error (scripts/multihost.sh prints it
#: after the job: what a rank prints as the launcher tears the job down may never reach it)
REPORT_ENV = "MPIKANEL_WATCH_REPORT"


def enabled(names: list[str], env: dict[str, str] | None = None) -> bool:
    """Whether to watch: MPIKANEL_WATCH=0/1 decides, else whether the ranks span several nodes."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    return value == "1" if value in ("0", "1") else len(set(names)) > 1


def lost_line(lost: list[int], names: list[str]) -> str:
    """The one line that names the lost ranks and their hosts (a host all of whose ranks were lost says so)."""
    by_host: dict[str, list[int]] = {}
    for r in sorted(lost):
        by_host.setdefault(names[r], []).append(r)
    parts = []
    for host, ranks in by_host.items():
        whole = len(ranks) == names.count(host)
        parts.append(f"{host}{' (all its ranks)' if whole else ''}")
    plural = "s" if len(lost) > 1 else ""
    return (f"mpikanel: lost rank{plural} {', '.join(map(str, sorted(lost)))} on {', '.join(parts)}: "
            f"the process{'es' if plural else ''} ended mid-run; ending the job")


class Watch:
    """This rank's side of the watch; close() when the run ends (a no-op where not watching)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def close(self) -> None:
        """Say bye (rank > 0) or stop watching (rank 0)."""
        self._stop.set()
        if self._sock is not None:
            try:
                self._sock.sendall(BYE)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        if self._thread is not None:
            self._thread.join(timeout=1.0)


def watch_ranks(comm: Any, names: list[str]) -> Watch:
    """Start watching (collective over `comm`); `names`: every rank's processor name."""
    watch = Watch()
    rank = comm.Get_rank()
    if not comm.bcast(enabled(names) if rank == 0 else None, root=0) or comm.Get_size() < 2:
        return watch
    if rank == 0:
        server = socket.create_server(("", 0), backlog=comm.Get_size())
        where = (server.getsockname()[1], _addresses())
        comm.bcast(where, root=0)
        watch._thread = threading.Thread(target=_rank0_loop, args=(server, comm, names, watch._stop),
                                         name="mpikanel-watch", daemon=True)
        watch._thread.start()
        return watch
    port, addresses = comm.bcast(None, root=0)
    targets = ["127.0.0.1"] if names[rank] == names[0] else addresses
    watch._sock = _connect(targets, port, rank)
    return watch


def _addresses() -> list[str]:
    """Rank 0's addresses other hosts may reach: its hostname's non-loopback ones, then the name."""
    host = socket.gethostname()
    try:
        found = {ai[4][0] for ai in socket.getaddrinfo(host, None, socket.AF_INET)}
    except OSError:
        found = set()
    return sorted(a for a in found if not a.startswith("127.")) + [host]


def _connect(targets: list[str], port: int, rank: int) -> socket.socket | None:
    """A connection to rank 0 that has announced this rank, or None (said once) within CONNECT_S."""
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
    print(f"mpikanel: rank {rank} cannot reach rank 0's watch port ({', '.join(targets)}:{port}: {error}); "
          "this rank is not watched", file=sys.stderr, flush=True)
    return None


def _rank0_loop(server: socket.socket, comm: Any, names: list[str], stop: threading.Event) -> None:
    """Accept the ranks' connections; on an end without bye, name the lost ranks and abort."""
    sel = selectors.DefaultSelector()
    server.setblocking(False)
    sel.register(server, selectors.EVENT_READ)
    received: dict[socket.socket, bytes] = {}
    lost: list[int] = []
    first_lost = 0.0
    accept_until = time.monotonic() + CONNECT_S
    try:
        while not stop.is_set():
            if server.fileno() >= 0 and (len(received) >= comm.Get_size() - 1 or time.monotonic() > accept_until):
                sel.unregister(server)
                server.close()
            for key, _ in sel.select(timeout=0.002 if lost else 0.1):
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
                if data and BYE not in received[conn]:
                    continue
                sel.unregister(conn)
                conn.close()
                head, newline, _ = received[conn].partition(b"\n")
                if not data and newline and not stop.is_set():
                    lost.append(int(head))
                    first_lost = first_lost or time.monotonic()
            if lost and not stop.is_set() and (time.monotonic() - first_lost >= SETTLE_S or _hosts_gone(lost, names)):
                _say(lost_line(lost, names))
                comm.Abort(1)
                return
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()


def _hosts_gone(lost: list[int], names: list[str]) -> bool:
    """Whether every rank on the hosts of the lost ranks is lost."""
    hosts = {names[r] for r in lost}
    return all(r in lost for r, name in enumerate(names) if name in hosts)


def _say(line: str) -> None:
    """The lost-ranks line: to $MPIKANEL_WATCH_REPORT if set, else to standard error."""
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")
    else:
        print(line, file=sys.stderr, flush=True)
