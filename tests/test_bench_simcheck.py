"""bench simcheck: the comparison as pure functions on fabricated records, and one tiny paced run."""
import json
import subprocess
import sys

import pytest

from launch import clean_env
from mpikanel.bench import simcheck


def _rec(sync: str, real_curve, sim_curve, final: float, psp=None) -> dict:
    side = {"wait share": 0.1, "pushes/worker": 10.0, "staleness mean": 1.0, "psp error": psp}
    return {"sync": sync, "real": dict(side), "sim": dict(side), "real_final_loss": final,
            "_real_curve": real_curve, "_sim_curve": sim_curve}


def test_one_target_per_group_from_real_bsp_and_speedups_each_against_its_own_bsp():
    t = [0.0, 1.0, 2.0, 3.0, 4.0]
    bsp = _rec("bsp", (t, [2, 2, 2, 1.05, 1.0]), (t, [2, 2, 1.05, 1.0, 1.0]), final=1.0)
    psp = _rec("psp", (t, [2, 1.05, 0.9, 0.9, 0.9]), (t, [2, 1.05, 1.0, 1.0, 1.0]), final=0.9, psp=0.05)
    simcheck.compare([bsp, psp])
    assert bsp["target"] == psp["target"] == pytest.approx(1.05)      # BSP's real final loss, for both
    assert bsp["real"]["held s"] == 3.0 and bsp["sim"]["held s"] == 2.0
    assert psp["real"]["held s"] == 1.0 and psp["sim"]["held s"] == 1.0
    assert psp["real"]["speedup"] == 3.0 and psp["sim"]["speedup"] == 2.0      # each side over its own BSP
    assert psp["error"]["speedup"] == pytest.approx(1 / 3) and psp["error"]["held s"] == 0.0
    assert bsp["error"]["speedup"] is None                                   # 1/1 by definition: no check
    assert "_real_curve" not in psp


def test_without_bsp_each_run_is_held_to_its_own_final_loss():
    t = [0.0, 1.0, 2.0]
    asp = _rec("asp", (t, [2.0, 1.05, 1.0]), (t, [2.0, 2.0, 1.05]), final=1.0)
    simcheck.compare([asp])
    assert asp["target"] == pytest.approx(1.05)
    assert asp["real"]["held s"] == 1.0 and asp["sim"]["held s"] == 2.0 and asp["real"]["speedup"] is None


def test_wait_share_error_is_absolute_the_others_relative():
    assert simcheck.error("wait share", 0.30, 0.36) == pytest.approx(0.06)
    assert simcheck.error("held s", 2.0, 2.2) == pytest.approx(0.1)
    assert simcheck.error("held s", None, 2.2) is None


def test_server_model_is_calibrated_from_the_measured_busy_time_per_push_and_per_probe():
    summary = {"server_ranks": [{"pushes": 100, "busy_s": 0.03}, {"pushes": 100, "busy_s": 0.01}],
               "bytes_per_push": 0, "server_probes": 50, "server_probe_s": 0.001}
    model = simcheck.calibrated_server(summary)
    assert model.push_s == pytest.approx(200e-6) and model.probe_s == pytest.approx(20e-6)
    assert simcheck.calibrated_server({"server_ranks": []}) == simcheck.ServerModel()


def test_paced_epochs_give_each_worker_about_the_asked_steps():
    assert simcheck.paced_epochs(400, 64, 20000, 64) == 82          # 400 x 64 x 64 / 20000 = 81.9
    assert simcheck.paced_epochs(400, 8, 20000, 64) == 10
    assert simcheck.paced_epochs(1, 1, 20000, 64) == 1


@pytest.mark.timeout(600)
def test_paced_simcheck_end_to_end(tmp_path):
    """Two models on 3 paced ranks: each real run replayed, the speedup and the calibration recorded."""
    out = tmp_path / "simcheck"
    cmd = [sys.executable, "-m", "mpikanel.bench", "simcheck", "--step-time", "0.01", "--ranks", "3",
           "--scenarios", "straggler", "--models", "bsp", "psp", "--quick", "--allow-dirty", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=560, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "simcheck.json").read_text())
    assert res["step_time"] == 0.01
    recs = {r["sync"]: r for r in res["records"]}
    assert set(recs) == {"bsp", "psp"} and recs["bsp"]["target"] == recs["psp"]["target"]
    assert recs["psp"]["real"]["psp error"] is not None and recs["psp"]["sim"]["psp error"] is not None
    assert recs["bsp"]["real"]["speedup"] == 1.0 and recs["bsp"]["pacing_held"] is not None
    assert all(r["server_push_us"] > 0 and r["real"]["held s"] for r in recs.values())
    md = (out / "simcheck.md").read_text()
    assert "speedup real/sim" in md and "pacing held" in md and "--step-time 0.01" in md
