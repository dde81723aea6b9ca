"""Stop signals: SIGTERM/SIGUSR1 (what SLURM sends before a time limit) and SIGINT (Ctrl-C) set a flag the run polls."""
from __future__ import annotations

import signal
import threading

from .errors import Interrupted


class StopSignals:
    """Installs flag-setting handlers (main thread only); ``restore`` puts the old ones back.

    Handlers only set a flag, so repeated signals (a time-limit TERM arriving directly and
    through the batch script's trap) are harmless; the run checkpoints once and exits 75.
    """

    SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")

    def __init__(self, enabled: bool) -> None:
        self.flag = False
        self.signum = 0                  # the first stop signal that arrived
        self.previous: dict = {}
        if enabled and threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if not self.flag:
            self.signum = signum
        self.flag = True

    def requested(self) -> bool:
        """True once a stop signal arrived on this rank."""
        return self.flag

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def end_start_up(self) -> None:
        """Put the previous handlers back; raise Interrupted if a stop signal came in the meantime.

        For a run with nothing to checkpoint. The caller must not just return: peers the signal
        reached later, or never, are blocked in MPI waiting for this rank, so only an abort ends them.
        """
        self.restore()
        if self.flag:
            raise Interrupted(self.signum or signal.SIGTERM)
