"""``bench simcheck``: replay real runs in the simulator and compare what both measured.

For each (ranks, scenario, sync model): one real ``mpiexec -n R python -m mpikanel.train`` run
writing a metrics file, then ``mpikanel.sim`` with the same flags, each worker's step time taken
from the real run (``--replay``: compute + injected seconds per step) and the link latency
calibrated from it (half the median blocked-but-not-held seconds per exchange). Compared per
pair: wait share (sum of per-worker wait_s over workers x wall), pushes per worker, mean
staleness, and the held time to a target (1.05 x the real run's final test loss). Writes
``DIR/simcheck.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ..comm.environment import mpiexec_launch
from ..config import config_from_args
from ..errors import InputError
from ..metrics import read_metrics, time_to_target
from ..sim.models import NetworkModel
from ..sim.run import SimOptions, simulate
from .launch import rank_env
from .provenance import default_out
from .sync import SCENARIOS, markdown_table

WORKLOAD = {"synthetic-rows": "60000", "synthetic-features": "1000", "batch-size": "1024", "epochs": "4",
            "snapshot-interval": "0.05", "lr": "0.5"}
METRICS = ("wait share", "pushes/worker", "staleness mean", "held s")
TOLERANCE = {"wait share": 0.15, "pushes/worker": 0.15, "staleness mean": 0.15, "held s": 0.20}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the simulator validation."""
    parser.add_argument("--ranks", type=int, nargs="+", default=[5, 9], help="real world sizes (server + workers)")
    parser.add_argument("--scenarios", nargs="+", default=["homogeneous", "straggler", "slow-link"],
                        choices=tuple(SCENARIOS))
    parser.add_argument("--models", nargs="+", default=["bsp", "asp", "esp", "psp"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny workload (for tests)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per real run")
    parser.add_argument("--out", default=None, help="output directory (default runs/simcheck-TIME)")


def _flags(d: dict[str, str]) -> list[str]:
    return [x for k, v in d.items() for x in (f"--{k}", v)]


def measures(summary: dict, curve_t, curve_loss, target: float) -> dict[str, float | None]:
    """The compared quantities of one run's summary and test curve."""
    workers = summary["per_worker"]
    n, wall = len(workers), summary["wall_s"]
    return {"wait share": sum(w["wait_s"] for w in workers) / max(n * wall, 1e-12),
            "pushes/worker": float(np.mean([w["pushes"] for w in workers])),
            "staleness mean": float(np.mean([w.get("staleness_mean", 0.0) for w in workers])),
            "held s": time_to_target(curve_t, curve_loss, target)}


def relative_error(real: float | None, sim: float | None) -> float | None:
    """|sim - real| / real (None when either is missing); an absolute 0.01 floor for near-zero shares."""
    if real is None or sim is None:
        return None
    return abs(sim - real) / max(abs(real), 0.01)


def calibrated_latency(summary: dict) -> float:
    """One-way latency implied by a real run: half the median blocked-not-held seconds per exchange."""
    per = [w["comm_s"] / max(1, w["exchanges_completed"]) for w in summary["per_worker"]]
    return max(1e-6, float(np.median(per)) / 2)


def results_dir(args: argparse.Namespace) -> str:
    """--out, or runs/simcheck-TIME."""
    return args.out or default_out("simcheck")


def run(args: argparse.Namespace) -> int:
    """Real run, replay, compare; write the table."""
    out = Path(results_dir(args))
    out.mkdir(parents=True, exist_ok=True)
    workload = dict(WORKLOAD)
    if args.quick:
        workload.update({"synthetic-rows": "4000", "synthetic-features": "20", "batch-size": "64", "epochs": "2",
                         "snapshot-interval": "0.02", "lr": "0.2"})
    load_before = os.getloadavg()[0]
    records = []
    for ranks in args.ranks:
        for scenario in args.scenarios:
            for model in args.models:
                flags = {**workload, **SCENARIOS[scenario], "sync": model, "seed": str(args.seed)}
                try:
                    rec = _pair(out, ranks, scenario, model, flags, args.timeout)
                except (InputError, RuntimeError, subprocess.SubprocessError) as exc:
                    print(f"  {ranks} {scenario} {model}: failed: {exc}", file=sys.stderr)
                    continue
                records.append(rec)
                print(f"  {ranks} {scenario:<12} {model:<4} " + "  ".join(_cell(rec, m) for m in METRICS),
                      file=sys.stderr, flush=True)
    within = {m: _share_within(records, m) for m in METRICS}
    text = (f"# bench simcheck\n\ncommand: `python -m mpikanel.bench {' '.join(sys.argv[1:])}`"
            f"\n\nworkload: `{' '.join(_flags(workload))}`; load average before {load_before:.2f}, after "
            f"{os.getloadavg()[0]:.2f}; nproc {os.cpu_count()}\n\n" + format_table(records) + "\n")
    (out / "simcheck.md").write_text(text)
    (out / "simcheck.json").write_text(json.dumps({"workload": workload, "records": records,
                                                   "within": within}, indent=2, default=lambda o: o.item()))
    print(text)
    return 0 if records else 1


def format_table(records: list[dict]) -> str:
    """One line per (ranks, scenario, sync) pair, then the share of pairs within tolerance."""
    headers = ("ranks", "scenario", "sync") + tuple(f"{m} real/sim (err)" for m in METRICS)
    rows = [[str(r["ranks"]), r["scenario"], r["sync"]] + [_cell(r, m) for m in METRICS] for r in records]
    within = {m: _share_within(records, m) for m in METRICS}
    return (markdown_table(headers, rows) + "\n\nwithin tolerance: "
            + ", ".join(f"{m} {within[m][0]}/{within[m][1]} (<= {TOLERANCE[m]:.0%})" for m in METRICS))


def _pair(out: Path, ranks: int, scenario: str, model: str, flags: dict, timeout: float) -> dict:
    """One real run and its replay."""
    name = f"{ranks}-{scenario}-{model}"
    metrics = out / f"{name}-real.h5"
    cmd, env = mpiexec_launch(["python", "-m", "mpikanel.train", "--quiet", "--progress", "off", *_flags(flags),
                               "--metrics", str(metrics)], ["-n", str(ranks)], env=rank_env(None))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    real = read_metrics(metrics)
    rs = real["summary"]
    target = 1.05 * rs["test_loss"]
    config = config_from_args([*_flags(flags), "--quiet", "--progress", "off", "--metrics", str(out / f"{name}-sim.h5")])
    latency = calibrated_latency(rs)
    ss = simulate(config, SimOptions(ranks - 1, replay=str(metrics), network=NetworkModel(latency_s=latency)))
    sim_curve = ss["curve"]
    r = measures(rs, real["curve"]["time_s"], real["curve"]["test_loss"], target)
    s = measures(ss, sim_curve["time_s"], sim_curve["test_loss"], target)
    return {"ranks": ranks, "scenario": scenario, "sync": model, "latency_s": latency, "target": target,
            "real": r, "sim": s, "error": {m: relative_error(r[m], s[m]) for m in METRICS},
            "real_wall_s": rs["wall_s"], "sim_wall_s": ss["wall_s"],
            "max_step_time_ratio": max(w["step_time_rel"] for w in rs["per_worker"])}


def _cell(rec: dict, m: str) -> str:
    r, s, e = rec["real"][m], rec["sim"][m], rec["error"][m]
    f = (lambda x: "-" if x is None else f"{x:.3g}")
    return f"{f(r)}/{f(s)} ({'-' if e is None else f'{e:.0%}'})"


def _share_within(records: list[dict], m: str) -> tuple[int, int]:
    errs = [r["error"][m] for r in records if r["error"][m] is not None]
    return sum(e <= TOLERANCE[m] for e in errs), len(errs)
