"""The end of a run, on the rank that holds the results: the summary, its curve, and the files
it asks for (metrics, model, JSON)."""
from __future__ import annotations

import json
import sys

import numpy as np

from .evaluate import curve_of
from .hetero import describe_hetero
from .metrics import SnapshotRecorder, evaluate_curve, write_metrics
from .model_io import save_model
from .session import Session, hetero_spec
from .summary import add_curve, evaluate, format_summary, warn_pacing


def publish(s: Session, params: np.ndarray, initial: np.ndarray, losses: list, workers: list[dict],
            produced: np.ndarray, server_stats, wall: float, recorder: SnapshotRecorder, run_info: dict,
            transport: str, ranks: int) -> dict:
    """The run summary from the gathered results; writes the metrics file and JSON, prints it."""
    summary = evaluate(s, params, initial, losses, workers, produced, server_stats, wall,
                       mpi_library=transport, ranks=ranks)
    summary["scenario"] = s.config.scenario or describe_hetero(hetero_spec(s.config))
    summary.update(run_info)
    summary["stopped"] = bool(server_stats.stopped)
    warn_pacing(summary)
    if server_stats.policy_report is not None:
        summary[s.config.sync] = server_stats.policy_report
    curve = snapshot_curve(s, recorder)
    add_curve(summary, curve, s.config.target_loss)
    if s.config.metrics:
        write_metrics(s.config.metrics, summary, curve, summary["per_worker"],
                      {"sync": s.config.sync, "model": s.model.name, "workers": summary["workers"],
                       "seed": s.config.seed, "scenario": summary["scenario"],
                       "command": " ".join(sys.argv), "versions": summary["versions"]})
    if s.config.save_model:
        save_model(s.config.save_model, params, s.config.to_dict(), s.info.n_features, s.info.label_values)
        summary["model_file"] = s.config.save_model
        if not s.config.quiet:
            print(f"mpikanel: model saved to {s.config.save_model} (use it with: python -m mpikanel.predict --model "
                  f"{s.config.save_model} --data FILE, or mpikanel.load_model)", flush=True)
    if s.config.summary_json:
        with open(s.config.summary_json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if not s.config.quiet:
        print(format_summary(summary), flush=True)
    return summary


def snapshot_curve(s: Session, recorder: SnapshotRecorder) -> dict:
    """Test (and validation) loss/accuracy of every parameter snapshot, evaluated after training."""
    if s.test is None or s.test.rows == 0:
        return evaluate_curve([], lambda p: 0.0, None)
    return curve_of(recorder.snapshots, {"test": s.test, "val": s.val}, s.config.hidden, s.config.activation,
                    s.config.curve_points)

