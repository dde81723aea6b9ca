"""Staleness-aware damping of a delta at the server (``--staleness-lr``), for every sync model.

Pure: the scale of a delta is a function of the server's version, the version the delta was
computed on, and the norms of the updates applied in between, all passed in.

* ``off``: every delta at its full rate;
* ``inverse``: 1 / (1 + tau), tau = versions applied since the delta's base (Zhang et al., 2016);
* ``gap``: 1 / (1 + G), G = the parameters' move since the base in units of a typical update
  (the gap-aware damping of Barkai et al., 2020). The server keeps no old parameters, so the move
  is measured by its triangle-inequality bound, the sum of the applied updates' norms since the
  base, over their recent mean: G equals tau when updates are alike, and is smaller when the
  updates since the base were small (a worker stale across a quiet stretch is damped less).

Under BSP every delta has tau = 0: damping never changes a lockstep run. What damping takes away
from a delta is kept in the run's ``unapplied`` sum, so no work is silently lost.
"""
from __future__ import annotations

import numpy as np

DAMPINGS = ("off", "inverse", "gap")
#: versions of applied-update norms kept for the gap (older bases count as tau typical updates)
HISTORY = 4096
#: the recent versions whose updates make the typical update norm
RECENT = 64


def inverse_scale(tau: int) -> float:
    """1 / (1 + tau): the rate of a delta computed `tau` versions ago."""
    return 1.0 / (1.0 + max(0, tau))


class StalenessDamping:
    """The server's record of applied-update norms by version, and the scale of a stale delta."""

    def __init__(self, kind: str = "off") -> None:
        if kind not in DAMPINGS:
            raise ValueError(f"staleness damping must be one of {', '.join(DAMPINGS)}, got {kind!r}")
        self.kind = kind
        self.cumulative = np.zeros(HISTORY)     # sum of applied-update norms up to each version (ring)
        self.version = 0

    def observe(self, version: int, norm: float) -> None:
        """The update that made `version` (one more than the last) had this norm."""
        self.cumulative[version % HISTORY] = self.cumulative[(version - 1) % HISTORY] + norm
        self.version = version

    def scale(self, version: int, base_version: int) -> float:
        """The rate of a delta computed at `base_version`, applied at `version`."""
        tau = max(0, version - base_version)
        if self.kind == "off" or tau == 0:
            return 1.0
        if self.kind == "inverse":
            return inverse_scale(tau)
        recent = min(RECENT, version)
        typical = (self.cumulative[version % HISTORY] - self.cumulative[(version - recent) % HISTORY]) / max(1, recent)
        if tau >= HISTORY or typical <= 0.0:
            return inverse_scale(tau)
        moved = self.cumulative[version % HISTORY] - self.cumulative[(version - tau) % HISTORY]
        return 1.0 / (1.0 + moved / typical)
