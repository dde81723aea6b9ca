"""``bench psp-plan``: the planning-time table (behaviour only; the timings are benchmarks)."""
import json

from mpikanel.bench.__main__ import main


def test_psp_plan_bench_writes_a_row_per_size_with_real_plans(tmp_path):
    assert main(["psp-plan", "--workers", "20", "200", "--rounds", "3", "--out", str(tmp_path), "--allow-dirty"]) == 0
    rows = json.loads((tmp_path / "psp-plan.json").read_text())["rows"]
    assert [r["workers"] for r in rows] == [20, 200]
    assert all(r["plan_ms"] > 0 and r["push_us"] > 0 for r in rows)
    assert all(r["k_mean"] > 1 for r in rows)            # a 4x straggler: the others get more steps
    assert "goal" in (tmp_path / "psp-plan.md").read_text()
