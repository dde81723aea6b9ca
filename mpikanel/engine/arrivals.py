"""How long a waiting server sleeps between tests of its requests: a backoff, and when the next push is due.

A server that waits tests its requests, then sleeps about a tenth of the time waited so far
(:func:`pause_after`): an idle rank costs about 1% of a core, but a push that lands mid-sleep
waits for the rest of it, on average 5% of the time waited. With one worker that is 5% of its
step (a server that waited a 24 ms step sleeps 2.4 ms at a time). Workers that compute at a steady
pace push at a predictable time after their reply: :class:`ArrivalForecast` learns each worker's
interval from its reply to its next push, and the server polls at the shortest pause from a little
before the earliest push due until a little after it, never sleeping longer than the backoff would.
Workers whose interval varies too much to predict get no window: the backoff alone. Where the node
has a core for every rank, the backoff is a hundredth of the time waited, not a tenth (polling
then takes no other rank's CPU).
"""
from __future__ import annotations

import math

PAUSE_MIN_S = 5e-5
PAUSE_MAX_S = 5e-3
BACKOFF = 0.1               # the pause, as a fraction of the time waited so far ...
BACKOFF_SPARE_CORES = 0.01  # ... where the node has a core for every rank: polling takes no one's CPU
WINDOW_MIN_S = 2e-4         # the least half-width of a due push's window
WINDOW_SPREADS = 3.0        # half-width in smoothed absolute deviations of the worker's interval
# A worker whose window would be wider than this fraction of its interval is not predictable: no
# window (the backoff alone), so that jittery workers (16-64 paced ranks on 2 cores) do not keep the
# server polling. Lenient, because the intervals a server measures carry its own sleeps' jitter until
# windows remove it: a steady worker at 24 ms steps showed a window of about 6 ms at first, 1.5 ms after.
WINDOW_MAX_FRACTION = 0.5
SMOOTHING = 0.25            # weight of the newest interval in the running mean and deviation


def pause_after(waited_s: float, backoff: float = BACKOFF) -> float:
    """Seconds to sleep before the next test, after waiting `waited_s` so far."""
    return min(PAUSE_MAX_S, max(PAUSE_MIN_S, backoff * waited_s))


def backoff_for(ranks_here: int, cores: int) -> float:
    """The servers' backoff on a node running `ranks_here` ranks on `cores` cores."""
    return BACKOFF_SPARE_CORES if ranks_here <= cores else BACKOFF


class ArrivalForecast:
    """When each worker's next push should land: its last reply plus its smoothed reply-to-push interval."""

    def __init__(self, n_workers: int, backoff: float = BACKOFF) -> None:
        self.backoff = backoff
        self._replied = [math.nan] * n_workers      # when the reply it is computing from was sent; nan: none
        self._interval = [math.nan] * n_workers
        self._spread = [0.0] * n_workers
        self._windows: list[tuple[float, float]] | None = []     # every due push's window; None: to redo

    def replied(self, w: int, now: float) -> None:
        """Worker w was sent its reply at `now`: its next push is due one interval later."""
        self._replied[w] = now
        self._windows = None

    def arrived(self, w: int, now: float) -> None:
        """Worker w's push landed at `now`: learn the interval since its reply."""
        sent, self._replied[w] = self._replied[w], math.nan
        self._windows = None
        if math.isnan(sent):
            return
        x, mean = now - sent, self._interval[w]
        if math.isnan(mean):
            self._interval[w], self._spread[w] = x, 0.0
        else:
            self._spread[w] += SMOOTHING * (abs(x - mean) - self._spread[w])
            self._interval[w] = mean + SMOOTHING * (x - mean)

    def window(self, w: int) -> tuple[float, float] | None:
        """(opens, closes) of worker w's next push; None when none is due, its interval is unknown,
        or it varies too much to predict."""
        sent, mean = self._replied[w], self._interval[w]
        if math.isnan(sent) or math.isnan(mean):
            return None
        half = max(WINDOW_MIN_S, WINDOW_SPREADS * self._spread[w])
        if 2 * half > WINDOW_MAX_FRACTION * mean:
            return None
        due = sent + mean
        return due - half, due + half

    def pause(self, now: float, waited_s: float) -> float:
        """Seconds to sleep before the next test: the shortest inside a due push's window, else the
        backoff, cut short where a window opens sooner (windows already closed are ignored)."""
        if self._windows is None:
            self._windows = [win for w in range(len(self._replied)) if (win := self.window(w)) is not None]
        pause = pause_after(waited_s, self.backoff)
        for opens, closes in self._windows:
            if closes < now:
                continue
            if opens <= now:
                return PAUSE_MIN_S
            pause = min(pause, opens - now)
        return max(PAUSE_MIN_S, pause)
