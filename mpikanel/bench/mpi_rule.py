"""The rule that picks the default MPI wheel, applied to ``bench mpi`` tables.

Intel MPI's wheel (proprietary, 17x Open MPI's size, x86_64 only) stays the default only while it
earns that: over the communication-bound rows, its speed is at least ``FACTOR`` times Open MPI's
(geometric mean of the per-row speed ratios, as benchmark suites summarize rows), and on no
communication-bound row is it slower beyond the run-to-run spread (its max below Open MPI's min,
or the reverse for a time). Otherwise the default is Open MPI.

A row is communication-bound when communication, not compute, takes most of its wall: the server
loops and the default job model no compute; a paced job models ``PACED_MODELED_S`` of compute a
worker, so it counts when that is under half its wall (under the faster MPI). The compute-bound
job, the straggler scenario (its wall is the straggler's compute), cores used and idle CPU are
other questions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

FACTOR = 1.2
PROPRIETARY = "intelmpi"
OPEN = "openmpi"
#: rows with no modeled compute: (row key, higher is better)
NO_COMPUTE_ROWS = (("server4/asp", True), ("server4/bsp", True), ("server16/asp", True), ("server16/bsp", True),
                   ("default4/wall_s", False))
#: bench mpi's paced job: about 180 steps of 20 ms a worker (the summary's paced_s)
PACED_MODELED_S = 3.6


@dataclass(frozen=True)
class RowRatio:
    """One communication-bound row: how many times faster PROPRIETARY is than OPEN (median)."""
    key: str
    ratio: float
    slower_beyond_spread: bool


@dataclass(frozen=True)
class Verdict:
    """The rule applied to a table: the rows it weighed, their geometric mean, the default it picks."""
    rows: tuple[RowRatio, ...]
    geomean: float
    default: str

    @property
    def slower_rows(self) -> tuple[str, ...]:
        """Rows where PROPRIETARY is slower beyond the spread."""
        return tuple(r.key for r in self.rows if r.slower_beyond_spread)


def comm_bound_rows(table: dict[str, dict[str, dict]]) -> list[tuple[str, bool]]:
    """The communication-bound rows present for both wheels, with whether higher is better."""
    rows = list(NO_COMPUTE_ROWS)
    for key in sorted(table):
        if key.startswith("paced") and key.endswith("/wall_s"):
            cells = table[key]
            if PROPRIETARY in cells and OPEN in cells:
                fastest = min(cells[PROPRIETARY]["median"], cells[OPEN]["median"])
                if PACED_MODELED_S < fastest / 2:
                    rows.append((key, False))
    return [(k, hi) for k, hi in rows if PROPRIETARY in table.get(k, {}) and OPEN in table.get(k, {})]


def _ratio(cells: dict[str, dict], higher: bool) -> RowRatio | None:
    a, b = cells[PROPRIETARY], cells[OPEN]
    if higher:
        return None if b["median"] <= 0 else RowRatio("", a["median"] / b["median"], a["max"] < b["min"])
    return None if a["median"] <= 0 else RowRatio("", b["median"] / a["median"], a["min"] > b["max"])


def verdict(table: dict[str, dict[str, dict]]) -> Verdict | None:
    """Apply the rule to a bench mpi table (row key -> wheel -> median/min/max); None if no
    communication-bound row has both wheels."""
    rows = []
    for key, higher in comm_bound_rows(table):
        r = _ratio(table[key], higher)
        if r is not None:
            rows.append(RowRatio(key, r.ratio, r.slower_beyond_spread))
    if not rows:
        return None
    geomean = math.exp(sum(math.log(r.ratio) for r in rows) / len(rows))
    holds = geomean >= FACTOR and not any(r.slower_beyond_spread for r in rows)
    return Verdict(tuple(rows), geomean, PROPRIETARY if holds else OPEN)


def merge_tables(docs: list[dict]) -> dict[str, dict[str, dict]]:
    """One table from several bench mpi result documents (later sets win a row they share)."""
    table: dict[str, dict[str, dict]] = {}
    for doc in docs:
        for key, cells in doc.get("table", {}).items():
            table.setdefault(key, {}).update(cells)
    return table


def format_verdict(v: Verdict | None) -> str:
    """The rule's verdict as markdown: one line per row, then the decision."""
    if v is None:
        return f"No communication-bound row has both {PROPRIETARY} and {OPEN}: the rule cannot be applied."
    lines = [f"| communication-bound row | {PROPRIETARY} speed / {OPEN} speed (median) | slower beyond the spread |",
             "|---|---|---|"]
    lines += [f"| {r.key} | {r.ratio:.2f}x | {'yes' if r.slower_beyond_spread else 'no'} |" for r in v.rows]
    lines += ["", f"Geometric mean {v.geomean:.2f}x (rule: at least {FACTOR}x, and slower beyond the spread "
              f"on no row): the default is **{v.default}**."]
    return "\n".join(lines)
