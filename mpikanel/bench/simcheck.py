"""``bench simcheck``: replay real runs in the simulator and compare what both measured.

For each (ranks, scenario, sync model): one real ``mpiexec -n R python -m mpikanel.train`` run
writing a metrics file, then the simulator with the same flags and seed. Unpaced, each worker's
step time is taken from the real run (``--replay``: compute + injected seconds per step); paced
(``--step-time S``), both run the same modeled step times. The simulator's link latency and its
server (seconds per push, per probe) are calibrated from the real run (:func:`calibrated_latency`,
:func:`calibrated_server`). Compared per pair: wait share (sum of per-worker wait_s over workers
x wall), pushes per worker, mean staleness, the held time to a target, the speedup over BSP
(BSP's held time over the model's, each side against its own BSP) and PSP's median prediction
error. The target of a (ranks, scenario) is 1.05 x the real BSP run's final test loss (each run's
own final loss without BSP among the models). Writes ``DIR/simcheck.md`` and ``.json``.

Paced (the accelerator-paced scale check)::

    python -m mpikanel.bench simcheck --step-time 0.02 --ranks 9 17 33 65
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
from ..sim.models import NetworkModel, ServerModel
from ..sim.run import SimOptions, simulate
from .launch import rank_env
from .provenance import default_out
from .sync import SCENARIOS, markdown_table, model_run

WORKLOAD = {"synthetic-rows": "60000", "synthetic-features": "1000", "batch-size": "1024", "epochs": "4",
            "snapshot-interval": "0.05", "lr": "0.5"}
#: paced: small compute (softmax on 100 features, batches of 64) under a modeled step of --step-time;
#: the epochs are set per rank count so that each worker takes about --paced-steps steps
PACED_WORKLOAD = {"synthetic-rows": "20000", "synthetic-features": "100", "batch-size": "64",
                  "snapshot-interval": "0.1", "lr": "0.2"}
PACED_SCENARIOS = ("straggler", "lognormal")
PACED_MODELS = ("bsp", "ssp:3", "asp", "esp", "psp")
METRICS = ("wait share", "pushes/worker", "staleness mean", "held s", "speedup", "psp error")
#: the goals: held time and speedup over BSP within 10%, wait share within 0.05 (absolute: ABSOLUTE)
TOLERANCE = {"wait share": 0.05, "pushes/worker": 0.15, "staleness mean": 0.15, "held s": 0.10,
             "speedup": 0.10, "psp error": 0.5}
ABSOLUTE = ("wait share",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the simulator validation."""
    parser.add_argument("--ranks", type=int, nargs="+", default=[5, 9], help="real world sizes (server + workers)")
    parser.add_argument("--scenarios", nargs="+", default=None, choices=tuple(SCENARIOS),
                        help="default: homogeneous straggler slow-link; paced: " + " ".join(PACED_SCENARIOS))
    parser.add_argument("--models", nargs="+", default=None,
                        help="sync models, as bench sync names them (ssp:3); default: bsp asp esp psp; paced: "
                             + " ".join(PACED_MODELS))
    parser.add_argument("--step-time", type=float, default=None, metavar="S",
                        help="paced: every worker step lasts max(its compute, S x its slowdown), slept, in the "
                             "real runs and the same modeled time in the simulator (16-64 ranks on 2 cores)")
    parser.add_argument("--paced-steps", type=int, default=400,
                        help="paced: about this many steps per worker (sets the epochs per rank count)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tiny workload (for tests)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per real run")
    parser.add_argument("--out", default=None, help="output directory (default runs/simcheck-TIME)")


def _flags(d: dict[str, str]) -> list[str]:
    return [x for k, v in d.items() for x in (f"--{k}", v)]


def measures(summary: dict) -> dict[str, float | None]:
    """The compared quantities of one run's summary (held time and speedup: filled in by :func:`compare`)."""
    workers = summary["per_worker"]
    n, wall = len(workers), summary["wall_s"]
    psp = summary.get("psp") or {}
    return {"wait share": sum(w["wait_s"] for w in workers) / max(n * wall, 1e-12),
            "pushes/worker": float(np.mean([w["pushes"] for w in workers])),
            "staleness mean": float(np.mean([w.get("staleness_mean", 0.0) for w in workers])),
            "psp error": float(psp["median_relative_error"]) if psp.get("rounds") else None}


def relative_error(real: float | None, sim: float | None) -> float | None:
    """|sim - real| / real (None when either is missing); an absolute 0.01 floor for near-zero shares."""
    if real is None or sim is None:
        return None
    return abs(sim - real) / max(abs(real), 0.01)


def error(metric: str, real: float | None, sim: float | None) -> float | None:
    """The simulator's error on one metric: absolute for shares (ABSOLUTE), else relative."""
    if metric in ABSOLUTE and real is not None and sim is not None:
        return abs(sim - real)
    return relative_error(real, sim)


def calibrated_latency(summary: dict) -> float:
    """One-way latency implied by a real run: half the median blocked-not-held seconds per exchange."""
    per = [w["comm_s"] / max(1, w["exchanges_completed"]) for w in summary["per_worker"]]
    return max(1e-6, float(np.median(per)) / 2)


def results_dir(args: argparse.Namespace) -> str:
    """--out, or runs/simcheck-TIME."""
    return args.out or default_out("simcheck")


def paced_epochs(steps: int, workers: int, rows: int, batch: int) -> int:
    """Epochs that give each of `workers` workers about `steps` steps of `batch` rows (at least 1)."""
    return max(1, round(steps * batch * workers / rows))


def run(args: argparse.Namespace) -> int:
    """Real run, replay, compare; write the table."""
    out = Path(results_dir(args))
    out.mkdir(parents=True, exist_ok=True)
    paced = args.step_time is not None
    workload = dict(PACED_WORKLOAD if paced else WORKLOAD)
    if args.quick:
        workload.update({"synthetic-rows": "4000", "synthetic-features": "20", "batch-size": "64", "epochs": "2",
                         "snapshot-interval": "0.02", "lr": "0.2"})
    scenarios = args.scenarios or list(PACED_SCENARIOS if paced else ("homogeneous", "straggler", "slow-link"))
    models = args.models or list(PACED_MODELS if paced else ("bsp", "asp", "esp", "psp"))
    load_before = os.getloadavg()[0]
    records = []
    for ranks in args.ranks:
        sized = dict(workload)
        if paced:
            sized["step-time"] = f"{args.step_time:g}"
            if not args.quick:
                sized["epochs"] = str(paced_epochs(args.paced_steps, ranks - 1, int(workload["synthetic-rows"]),
                                                   int(workload["batch-size"])))
        for scenario in scenarios:
            group = []
            for model in models:
                flags = {**sized, **SCENARIOS[scenario], "seed": str(args.seed)}
                try:
                    group.append(_pair(out, ranks, scenario, model, flags, args.timeout, replay=not paced))
                except (InputError, RuntimeError, subprocess.SubprocessError) as exc:
                    print(f"  {ranks} {scenario} {model}: failed: {exc}", file=sys.stderr)
            compare(group)
            for rec in group:
                print(f"  {ranks} {scenario:<12} {rec['sync']:<5} " + "  ".join(_cell(rec, m) for m in METRICS),
                      file=sys.stderr, flush=True)
            records += group
    within = {m: _share_within(records, m) for m in METRICS}
    text = (f"# bench simcheck\n\ncommand: `python -m mpikanel.bench {' '.join(sys.argv[1:])}`"
            f"\n\nworkload: `{' '.join(_flags(workload))}`"
            + (f" `--step-time {args.step_time:g}`" if paced else "")
            + (f", epochs per rank count for ~{args.paced_steps} steps per worker" if paced and not args.quick else "")
            + f"; load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f}; nproc {os.cpu_count()}\n\n"
            + format_table(records) + "\n")
    (out / "simcheck.md").write_text(text)
    (out / "simcheck.json").write_text(json.dumps({"workload": workload, "step_time": args.step_time,
                                                   "records": records, "within": within},
                                                  indent=2, default=lambda o: o.item()))
    print(text)
    return 0 if records else 1


def compare(group: list[dict]) -> None:
    """Held times against one target per (ranks, scenario), the real BSP run's (each run's own final
    loss without BSP), the speedups over BSP and the relative errors, into each record of the group."""
    bsp = next((r for r in group if r["sync"] == "bsp"), None)
    for rec in group:
        target = 1.05 * (bsp or rec)["real_final_loss"]
        rec["target"] = target
        for side in ("real", "sim"):
            t, loss = rec.pop(f"_{side}_curve")
            rec[side]["held s"] = time_to_target(t, loss, target)
    for rec in group:
        for side in ("real", "sim"):
            base, own = (bsp or {}).get(side, {}).get("held s"), rec[side]["held s"]
            rec[side]["speedup"] = base / own if base and own else None
        rec["error"] = {m: error(m, rec["real"][m], rec["sim"][m]) for m in METRICS}
        if rec is bsp:
            rec["error"]["speedup"] = None          # 1/1 by definition: not a check


def format_table(records: list[dict]) -> str:
    """One line per (ranks, scenario, sync) pair, then the share of pairs within tolerance."""
    paced = any(r.get("pacing_held") is not None for r in records)
    headers = (("ranks", "scenario", "sync") + tuple(f"{m} real/sim (err)" for m in METRICS)
               + (("pacing held", "cores used", "start-up s") if paced else ()))
    rows = [[str(r["ranks"]), r["scenario"], r["sync"]] + [_cell(r, m) for m in METRICS]
            + ([str(r.get("pacing_held")), _num(r.get("cores_used"), ".2f"), _num(r.get("startup_s"), ".1f")]
               if paced else []) for r in records]
    within = {m: _share_within(records, m) for m in METRICS}
    return (markdown_table(headers, rows) + "\n\nwithin tolerance: "
            + ", ".join(f"{m} {within[m][0]}/{within[m][1]} "
                        f"({'<= ' + format(TOLERANCE[m], 'g') if m in ABSOLUTE else f'<= {TOLERANCE[m]:.0%}'})"
                        for m in METRICS))


def _num(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def calibrated_server(summary: dict) -> ServerModel:
    """The simulator's server from a real run: its measured busy seconds per push (less the bytes'
    share at the model's bandwidth) and per probe."""
    base = ServerModel()
    ranks = summary.get("server_ranks") or []
    pushes = sum(int(r["pushes"]) for r in ranks)
    if not pushes:
        return base
    busy = sum(float(r["busy_s"]) for r in ranks) / pushes
    push_s = max(1e-6, busy - float(summary.get("bytes_per_push") or 0) / len(ranks) / base.bandwidth)
    probes = int(summary.get("server_probes") or 0)
    probe_s = float(summary["server_probe_s"]) / probes if probes else base.probe_s
    return ServerModel(push_s=push_s, bandwidth=base.bandwidth, probe_s=probe_s)


def _pair(out: Path, ranks: int, scenario: str, model: str, flags: dict, timeout: float, replay: bool) -> dict:
    """One real run and its simulation (replaying the real step times, or the same pacing)."""
    name = f"{ranks}-{scenario}-{model.replace(':', '')}"
    metrics = out / f"{name}-real.h5"
    argv = [*model_run(model, ranks).flags, *_flags(flags)]
    cmd, env = mpiexec_launch(["python", "-m", "mpikanel.train", "--quiet", "--progress", "off", *argv,
                               "--metrics", str(metrics)], ["-n", str(ranks)], env=rank_env(None))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    real = read_metrics(metrics)
    rs = real["summary"]
    config = config_from_args([*argv, "--quiet", "--progress", "off", "--metrics", str(out / f"{name}-sim.h5")])
    latency, server = calibrated_latency(rs), calibrated_server(rs)
    ss = simulate(config, SimOptions(ranks - 1, replay=str(metrics) if replay else None,
                                     network=NetworkModel(latency_s=latency), server=server))
    return {"ranks": ranks, "scenario": scenario, "sync": model, "latency_s": latency,
            "server_push_us": 1e6 * server.push_s, "server_probe_us": 1e6 * server.probe_s,
            "real": measures(rs), "sim": measures(ss), "real_final_loss": rs["test_loss"],
            "_real_curve": (real["curve"]["time_s"], real["curve"]["test_loss"]),
            "_sim_curve": (ss["curve"]["time_s"], ss["curve"]["test_loss"]),
            "real_wall_s": rs["wall_s"], "sim_wall_s": ss["wall_s"], "pacing_held": rs.get("pacing_held"),
            "cores_used": rs.get("cores_used"), "startup_s": rs.get("startup_s"),
            "max_step_time_ratio": max(w["step_time_rel"] for w in rs["per_worker"])}


def _cell(rec: dict, m: str) -> str:
    r, s, e = rec["real"][m], rec["sim"][m], rec["error"][m]
    f = (lambda x: "-" if x is None else f"{x:.3g}")
    shown = "-" if e is None else (f"{e:.3f}" if m in ABSOLUTE else f"{e:.0%}")
    return f"{f(r)}/{f(s)} ({shown})"


def _share_within(records: list[dict], m: str) -> tuple[int, int]:
    errs = [r["error"][m] for r in records if r["error"][m] is not None]
    return sum(e <= TOLERANCE[m] for e in errs), len(errs)
