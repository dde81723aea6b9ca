"""`python -m mpikanel.plot --psp`: predicted vs actual arrivals of a PSP run's rounds."""
import numpy as np
import pytest

from mpikanel.metrics import write_metrics
from mpikanel.plot import main


def fake_run(path, psp):
    summary = {"sync": "psp" if psp else "bsp", "wall_s": 1.0, "test_loss": 0.5, "test_accuracy": 0.8,
               "per_worker": [{"rank": 1, "compute_s": 1.0, "comm_s": 0.1, "wait_s": 0.1, "injected_s": 0.0}]}
    if psp:
        summary["psp"] = {"rounds": 3, "fallback_rounds": 1, "predicted_s": [[0.01, 0.02]] * 3,
                          "actual_s": [[0.011, 0.019], [0.012, -1.0], [0.009, 0.021]], "k": [[1, 2]] * 3}
    curve = {"time_s": np.array([0.0, 1.0]), "version": np.array([0, 3]),
             "test_loss": np.array([2.0, 0.5]), "test_accuracy": np.array([0.1, 0.8])}
    write_metrics(path, summary, curve, summary["per_worker"], {"sync": summary["sync"]})


def test_psp_figure(tmp_path):
    pytest.importorskip("matplotlib")
    fake_run(tmp_path / "psp.h5", psp=True)
    fake_run(tmp_path / "bsp.h5", psp=False)
    assert main([str(tmp_path / "psp.h5"), str(tmp_path / "bsp.h5"), "--psp", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert main([str(tmp_path / "bsp.h5"), "--psp", str(tmp_path / "q.png")]) == 2   # no PSP run: clear error
