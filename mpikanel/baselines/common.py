"""What both baselines share: the run summary in the train summary's shape, and writing it out."""
from __future__ import annotations

import json
import platform
import sys
from typing import Any

import numpy as np

from .. import __version__
from ..config import TrainConfig
from ..hetero import describe_hetero
from ..metrics import write_metrics
from ..summary import add_curve
from ..train import hetero_spec


def make_summary(kind: str, config: TrainConfig, model: str, ranks: int, workers: list[dict],
                 wall_s: float, results: dict[str, Any], mpi_library: str = "") -> dict:
    """A summary dict with the keys of mpikanel.train's (sync = the baseline's name)."""
    summary = {"sync": kind, "model": model, "workers": len(workers), "ranks": ranks, "wall_s": wall_s,
               "per_worker": workers, "config": config.to_dict(),
               "scenario": config.scenario or describe_hetero(hetero_spec(config)),
               "versions": {"mpikanel": __version__, "python": platform.python_version(),
                            "numpy": np.__version__, "mpi": mpi_library}}
    summary.update(results)
    return summary


def finish(config: TrainConfig, summary: dict, curve: dict, extra_attrs: dict | None = None) -> None:
    """Add the curve, write the metrics file and summary JSON the config asks for, print unless quiet."""
    add_curve(summary, curve, config.target_loss)
    if config.metrics:
        attrs = {"sync": summary["sync"], "model": summary["model"], "workers": summary["workers"],
                 "seed": config.seed, "scenario": summary["scenario"], "command": " ".join(sys.argv),
                 "versions": summary["versions"], **(extra_attrs or {})}
        write_metrics(config.metrics, summary, curve, summary["per_worker"], attrs)
    if config.summary_json:
        with open(config.summary_json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if not config.quiet:
        reached = summary.get("time_to_target_s")
        print(f"{summary['sync']} {summary['model']}: {summary['workers']} trainers, wall {summary['wall_s']:.2f} s, "
              f"test loss {summary['test_loss']:.4f}, acc {summary['test_accuracy']:.2%}"
              + ("" if config.target_loss is None else
                 f", time to {config.target_loss:g}: " + ("not reached" if reached is None else f"{reached:.2f} s")),
              flush=True)
