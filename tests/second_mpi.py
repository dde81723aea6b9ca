"""Which end-to-end tests the second MPI runs inside CI's time: the ones every MPI must pass, then
the quickest of the rest by the default MPI's times, up to a budget."""
from __future__ import annotations

import math


def matches(nodeid: str, entry: str) -> bool:
    """Whether `entry` (a node id, or a module path for all its tests) names `nodeid`."""
    return nodeid == entry or nodeid.startswith(entry + "::")


def pick(nodeids: list[str], times: dict[str, float], always: tuple[str, ...],
         budget_s: float) -> tuple[list[str], list[str], float]:
    """(kept, left, seconds kept by `times`): every test `always` names, then the others quickest
    first while the total stays within `budget_s`; a test with no time is left (it was not timed)."""
    kept = [n for n in nodeids if any(matches(n, a) for a in always)]
    spent = sum(times.get(n, 0.0) for n in kept)
    left = []
    for n in sorted((n for n in nodeids if n not in kept), key=lambda n: times.get(n, math.inf)):
        t = times.get(n, math.inf)
        if spent + t <= budget_s:
            kept.append(n)
            spent += t
        else:
            left.append(n)
    return kept, left, spent
