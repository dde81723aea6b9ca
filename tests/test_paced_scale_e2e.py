"""Seventeen real ranks on two cores: paced workers (the CPU mostly sleeps, as beside an
accelerator), so what the sync model decides shows, not which rank the machine ran first."""
import pytest

from launch import run_train

pytestmark = pytest.mark.alone      # waits compared: no other stage beside it

# 6 epochs: about 3 s of paced training after 17 ranks' 12-15 s start-up storm; at 2 epochs (about 1 s) PSP
# waited 0.45-0.61x BSP's alone and 0.84x and 0.92x in two CI runs, at 6 epochs 0.28-0.48x alone
PACED = ["--synthetic-rows", "20000", "--epochs", "6", "--step-time", "0.02", "--slowdown", "lognormal:0.5",
         "--lr", "0.2"]


def test_seventeen_paced_ranks_psp_waits_less_than_bsp_and_esp_psp_end_near_bsp(tmp_path):
    runs = {}
    for sync in ("bsp", "esp", "psp"):
        proc, runs[sync] = run_train(17, "--sync", sync, *PACED, tmp_path=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert runs[sync]["workers"] == 16 and runs[sync]["samples"] == runs[sync]["samples_budget"]
        assert runs[sync]["pacing_held"] is True, (sync, runs[sync]["pacing_missed_share"])
    waits = {k: sum(w["wait_s"] for w in s["per_worker"]) for k, s in runs.items()}
    # the machine's load around each run, for a failure's reader: PSP plans from measured step times
    load = {k: (s["load_avg_before"], s["load_avg_after"]) for k, s in runs.items()}
    assert waits["psp"] < 0.8 * waits["bsp"], (waits, load)
    losses = {k: s["test_loss"] for k, s in runs.items()}
    for sync in ("esp", "psp"):
        assert losses[sync] <= 1.02 * losses["bsp"], losses
