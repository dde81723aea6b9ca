"""``bench sync``: time to a target test loss of every sync model and two baselines, per scenario.

Each (scenario, model, learning rate) is one launch: ``mpiexec -n R python -m mpikanel.train``
(or ``mpikanel.baselines.allreduce_sgd``; ``mpikanel.baselines.sklearn_sgd`` runs in one process
once per rate and is shown in every scenario, since heterogeneity does not apply to it) writing
``DIR/<scenario>-<model>-lr<lr>.h5``. Afterwards, per scenario:

* target loss = 1.02 x the best final test loss BSP reaches at any rate in that scenario
  (``--target-loss`` overrides; without a BSP run, the best final loss of any model);
* time to target = :func:`mpikanel.metrics.time_to_target` of each run's curve;
* each model is reported at its best rate: shortest time to target, then lowest final loss.

Default workload (softmax, 10 classes): ``--synthetic-rows 100000 --synthetic-features 1000
--batch-size 2048 --epochs 20 --snapshot-interval 0.1`` (220 steps per worker at 5 ranks).
Measured at 5 ranks on 2 cores (mpich wheel): a step's compute (~6-9 ms with 4 workers sharing
2 cores) is about twice an exchange (~3-8 ms, 80 kB), so a 4x straggler matters. 512-row batches
(60000x400 or 100000x1000, 2-3 epochs) made compute smaller than communication and the runs too
short (0.2-0.7 s) to time; 30 epochs made the harness too long. With 20 epochs BSP took 4.9-6.7 s
homogeneous and 10.7-14.8 s with ``--slowdown 1:4`` (load average 5-9 from other jobs). A run
also spends 5-20 s starting (5 Python processes, numba cache, data) outside its wall time, so
the default harness (2 scenarios x 6 MPI models x 3 rates, sklearn 3 x <= 30 s) takes ~8 min on
an idle 2-core machine and much longer on a loaded one. ``--slowdown`` scales *measured* compute,
so CPU contention from other ranks or jobs inflates the injected time too.
``--quick`` is a tiny workload for tests.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..metrics import read_metrics, time_to_target
from ..sync import AVAILABLE_SYNC_MODELS, SYNC_MODELS
from .launch import MpiexecNotFound, find_mpiexec, rank_env

#: scenario -> extra mpikanel.train flags (without the leading --)
SCENARIOS: dict[str, dict[str, str]] = {
    "homogeneous": {},
    "straggler": {"slowdown": "1:4"},
    "lognormal": {"slowdown": "lognormal:0.5"},
    "pauses": {"pause-prob": "0.05", "pause-s": "0.02"},
    "slow-link": {"link-delay": "1:0.03"},     # ~10x a ~3 ms exchange of the default workload
    # one server, 15 workers, 100k parameters (800 kB per push and per reply): the server and
    # the message volume are the bottleneck, which skipping exchanges relieves
    "congested": {"synthetic-rows": "30000", "synthetic-features": "10000", "batch-size": "64",
                  "epochs": "1"},
}
#: scenarios that need another rank count than --ranks
SCENARIO_RANKS = {"congested": 16}
WORKLOAD = {"synthetic-rows": "100000", "synthetic-features": "1000", "batch-size": "2048",
            "epochs": "20", "snapshot-interval": "0.1"}
QUICK = {"synthetic-rows": "6000", "synthetic-features": "20", "batch-size": "64",
         "epochs": "3", "snapshot-interval": "0.02"}
BASELINES = {"allreduce": "mpikanel.baselines.allreduce_sgd", "sklearn": "mpikanel.baselines.sklearn_sgd"}
TARGET_FACTOR = 1.02
HEADERS = ("model", "best lr", "time to target s", "ratio to BSP", "final test loss",
           "final test acc", "total wait s", "run wall s")


def default_models() -> list[str]:
    """Every available sync model (SSP as ssp:3), then the baselines."""
    return [f"{m}:3" if m == "ssp" else m for m in AVAILABLE_SYNC_MODELS] + list(BASELINES)


def _model_spec(text: str) -> str:
    name, _, arg = text.partition(":")
    if name not in SYNC_MODELS and name not in BASELINES:
        raise argparse.ArgumentTypeError(f"unknown model {text!r}; choose from "
                                         f"{', '.join(SYNC_MODELS + tuple(BASELINES))} "
                                         "(ssp:S, esp:inverse, psp:normalized)")
    if arg and name not in MODEL_ARG:
        raise argparse.ArgumentTypeError(f"only ssp:S, esp:SCALE and psp:AGGREGATE take a parameter, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the sync benchmark."""
    parser.add_argument("--scenario", nargs="+", action="extend", metavar="NAME",
                        help=f"scenarios: {', '.join(SCENARIOS)} or all (default: homogeneous straggler)")
    parser.add_argument("--models", nargs="+", type=_model_spec, default=None, metavar="MODEL",
                        help=f"models (default: {' '.join(default_models())})")
    parser.add_argument("--lrs", nargs="+", type=float, default=[0.05, 0.1, 0.2], help="learning-rate grid")
    parser.add_argument("--ranks", type=int, default=5, help="MPI ranks per run (the server + workers)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data, order and injection")
    parser.add_argument("--target-loss", type=float, default=None,
                        help=f"target test loss (default: {TARGET_FACTOR} x BSP's best final loss per scenario)")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: runs/bench-sync-<timestamp>)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds allowed per run")
    parser.add_argument("--quick", action="store_true", help="tiny workload (tests, smoke runs)")
    parser.add_argument("--sklearn-max-s", type=float, default=30.0,
                        help="stop the sklearn baseline after this much training time (0 = run all epochs)")
    for key in ("synthetic-rows", "synthetic-features", "batch-size", "epochs"):
        parser.add_argument(f"--{key}", type=int, default=None, help=f"workload override (default {WORKLOAD[key]})")


def _flags(values: dict[str, str]) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        out += [f"--{key}", str(value)]
    return out


#: what the ':ARG' of a model spec sets: ssp:3 (staleness), esp:inverse (stale-delta scaling),
#: psp:normalized (aggregation)
MODEL_ARG = {"ssp": "--staleness", "esp": "--esp-scale", "psp": "--psp-aggregate"}


def _model_flags(model: str) -> list[str]:
    name, _, arg = model.partition(":")
    if name in BASELINES:
        return []
    if name == "ssp":
        arg = arg or "3"
    return ["--sync", name] + ([MODEL_ARG[name], arg] if arg and name in MODEL_ARG else [])


def _execute(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    """Run cmd in its own process group; (exit code or None on timeout, stderr tail)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=rank_env(None), start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return None, f"timed out after {timeout:g}s; {err[-500:]}"
    return proc.returncode, err[-1500:]


def _run_one(args: argparse.Namespace, out: Path, scenario: str, model: str, lr: float,
             workload: dict[str, str]) -> dict:
    """Launch one run and return its record (metrics path, exit status, error)."""
    stem = f"{scenario}-{model.replace(':', '')}-lr{lr:g}"
    common = [*_flags(workload), "--lr", f"{lr:g}", "--seed", str(args.seed), "--metrics", str(out / f"{stem}.h5"),
              "--summary-json", str(out / f"{stem}.json"), "--quiet"]
    if model == "sklearn":
        eta0 = lr / int(workload["batch-size"])
        cmd = [sys.executable, "-m", BASELINES["sklearn"], *common, "--eta0", f"{eta0:g}"]
        if args.sklearn_max_s > 0:
            cmd += ["--max-train-s", f"{args.sklearn_max_s:g}"]
    else:
        module = BASELINES.get(model, "mpikanel.train")
        ranks = SCENARIO_RANKS.get(scenario, args.ranks)
        cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, "-m", module, *common,
               *_flags(SCENARIOS[scenario]), *_model_flags(model), "--scenario", scenario]
    t0 = time.perf_counter()
    code, err = _execute(cmd, args.timeout)
    record = {"scenario": scenario, "model": model, "lr": lr, "metrics": str(out / f"{stem}.h5"),
              "command": cmd, "exit_code": code, "elapsed_s": time.perf_counter() - t0, "ok": code == 0}
    if code == 3 and model == "sklearn":
        record["skipped"] = "scikit-learn not installed"
    elif code != 0:
        record["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
    return record


def _load(record: dict) -> None:
    """Add final loss, accuracy, total wait and wall time from the run's metrics file."""
    try:
        m = read_metrics(record["metrics"])
    except InputError as exc:
        record.update(ok=False, error=str(exc))
        return
    s = m["summary"]
    record.update(final_loss=s["test_loss"], final_accuracy=s["test_accuracy"], wall_s=s["wall_s"],
                  total_wait_s=sum(float(w.get("wait_s", 0.0)) for w in m["workers"]),
                  mpi_library=s.get("versions", {}).get("mpi", ""))
    record["_curve"] = (m["curve"]["time_s"], m["curve"]["test_loss"])


def _target(runs: list[dict], override: float | None) -> float | None:
    if override is not None:
        return override
    ok = [r for r in runs if r["ok"] and r.get("final_loss") is not None]
    bsp = [r for r in ok if r["model"] == "bsp"] or ok
    return TARGET_FACTOR * min(r["final_loss"] for r in bsp) if bsp else None


def _best(runs: list[dict], target: float | None) -> dict[str, dict]:
    """model -> its best run: shortest time to target, then lowest final test loss."""
    best: dict[str, dict] = {}
    for r in runs:
        if not r["ok"]:
            continue
        r["time_to_target_s"] = None if target is None else time_to_target(*r["_curve"], target)
        key = (r["time_to_target_s"] is None, r["time_to_target_s"] or 0.0, r["final_loss"])
        if r["model"] not in best or key < best[r["model"]]["_key"]:
            r["_key"] = key
            best[r["model"]] = r
    return best


def _row(model: str, r: dict | None, bsp_time: float | None, why: str = "failed") -> list[str]:
    if r is None:
        return [model, "-", why, "-", "-", "-", "-", "-"]
    t = r["time_to_target_s"]
    ratio = f"{bsp_time / t:.2f}" if t and bsp_time else "-"
    return [model, f"{r['lr']:g}", "not reached" if t is None else f"{t:.2f}", ratio, f"{r['final_loss']:.4f}",
            f"{r['final_accuracy']:.4f}", f"{r['total_wait_s']:.2f}", f"{r['wall_s']:.2f}"]


def markdown_table(headers: tuple[str, ...], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _plots(out: Path, scenario: str, best: dict[str, dict], target: float | None, ranks: int) -> list[str]:
    """Loss and timeline charts of each model's best run; names of the files written (or a note).

    The loss chart's time axis ends at 1.5x the longest MPI run (a long sklearn curve is cut there);
    the timeline leaves sklearn out (one process: compute only).
    """
    from ..plot import plot_loss_curves, plot_timeline

    runs = []
    for model, r in best.items():
        m = read_metrics(r["metrics"])
        m["attrs"].update(sync=model, scenario=f"lr {r['lr']:g}")
        runs.append(m)
    if not runs:
        return []
    walls = [m["summary"]["wall_s"] for m in runs if m["attrs"]["sync"] != "sklearn"]
    horizon = 1.5 * max(walls) if walls else float("inf")
    shown = [{**m, "curve": {k: np.asarray(v)[np.asarray(m["curve"]["time_s"]) <= horizon]
                             for k, v in m["curve"].items()}} for m in runs]
    loss, timeline = out / f"{scenario}-loss.png", out / f"{scenario}-timeline.png"
    try:
        plot_loss_curves(shown, loss, target, logy=True,
                         title=f"{scenario}: test loss vs wall time ({ranks} ranks, each model at its best lr)")
        plot_timeline([m for m in runs if m["attrs"]["sync"] != "sklearn"] or runs, timeline)
    except InputError as exc:
        return [f"plots skipped: {exc}"]
    return [loss.name, timeline.name]


def _versions(runs: list[dict]) -> dict[str, str]:
    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    mpi = " ".join(next((r["mpi_library"] for r in runs if r.get("mpi_library")), "").split())
    return {"mpikanel": v("mpikanel"), "mpi4py": v("mpi4py"), "mpi_library": mpi, "mpich_wheel": v("mpich"),
            "numpy": v("numpy"), "numba": v("numba"), "sklearn": v("scikit-learn"),
            "python": sys.version.split()[0]}


def _scenarios(args: argparse.Namespace) -> list[str]:
    names = args.scenario or ["homogeneous", "straggler"]
    if "all" in names:
        return list(SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        raise InputError(f"unknown scenario(s) {', '.join(bad)}; choose from {', '.join(SCENARIOS)} or all")
    return list(dict.fromkeys(names))


def _workload(args: argparse.Namespace) -> dict[str, str]:
    workload = dict(QUICK if args.quick else WORKLOAD)
    for key in ("synthetic-rows", "synthetic-features", "batch-size", "epochs"):
        value = getattr(args, key.replace("-", "_"))
        if value is not None:
            workload[key] = str(value)
    return workload


def run(args: argparse.Namespace) -> int:
    """Run every (scenario, model, lr), write results.md/json and plots; 1 if a model has no good run."""
    t_start, load_before = time.perf_counter(), os.getloadavg()
    try:
        scenarios, models, workload = _scenarios(args), args.models or default_models(), _workload(args)
        if any(m not in BASELINES or m == "allreduce" for m in models):
            find_mpiexec()
    except (InputError, MpiexecNotFound) as exc:
        print(f"mpikanel bench sync: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or f"runs/bench-sync-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    records, sklearn_runs = [], {}
    for scenario in scenarios:
        for model in models:
            for lr in args.lrs:
                if model == "sklearn" and lr in sklearn_runs:    # one process: scenarios do not apply
                    records.append({**sklearn_runs[lr], "scenario": scenario, "shared": True})
                    continue
                r = _run_one(args, out, "all" if model == "sklearn" else scenario, model, lr, workload)
                r["scenario"] = scenario
                if r["ok"]:
                    _load(r)
                if model == "sklearn":
                    sklearn_runs[lr] = r
                records.append(r)
                status = (f"wall {r['wall_s']:.2f} s, loss {r['final_loss']:.4f}" if r["ok"]
                          else r.get("skipped") or r.get("error"))
                print(f"  {scenario:<12} {model:<9} lr {lr:<5g} {r['elapsed_s']:6.1f} s  {status}",
                      file=sys.stderr, flush=True)
    return _report(args, out, scenarios, models, workload, records, t_start, load_before)


def _report(args: argparse.Namespace, out: Path, scenarios: list[str], models: list[str],
            workload: dict[str, str], records: list[dict], t_start: float, load_before: tuple) -> int:
    """Tables, plots, results.md and results.json; the exit code."""
    tables, sections, missing = {}, [], 0
    for scenario in scenarios:
        runs = [r for r in records if r["scenario"] == scenario]
        target = _target(runs, args.target_loss)
        best = _best(runs, target)
        bsp_time = best["bsp"]["time_to_target_s"] if "bsp" in best else None
        skipped = {r["model"] for r in runs if r.get("skipped")}
        rows = [_row(m, best.get(m), bsp_time, "skipped" if m in skipped else "failed") for m in models]
        missing += sum(1 for m in models if m not in best and m not in skipped)
        plots = _plots(out, scenario, best, target, args.ranks)
        flags = " ".join(_flags(SCENARIOS[scenario])) or "(none)"
        notes = [f"- {r['model']} lr {r['lr']:g}: {r.get('skipped') or r.get('error')}"
                 for r in runs if not r["ok"] and not r.get("shared")]
        sections.append(f"### {scenario}\n\nflags: `{flags}`; target test loss "
                        f"{'n/a' if target is None else f'{target:.4f}'}\n\n{markdown_table(HEADERS, rows)}\n"
                        + ("\n" + "\n".join(notes) + "\n" if notes else "")
                        + "".join(f"\n![{p}]({p})\n" if p.endswith(".png") else f"\n{p}\n" for p in plots))
        tables[scenario] = {"flags": SCENARIOS[scenario], "target_loss": target, "plots": plots,
                            "rows": [dict(zip(HEADERS, row)) for row in rows]}
    wall = time.perf_counter() - t_start
    command = [sys.executable, "-m", "mpikanel.bench", *sys.argv[1:]]
    versions = _versions(records)
    header = (f"# bench sync\n\ncommand: `{' '.join(['python', '-m', 'mpikanel.bench', *sys.argv[1:]])}`\n\n"
              f"{args.ranks} ranks, seed {args.seed}, nproc {os.cpu_count()}, load average before "
              f"{load_before[0]:.2f} / after {os.getloadavg()[0]:.2f}, harness wall {wall:.0f} s\n\n"
              f"workload: `{' '.join(_flags(workload))}`; lrs {' '.join(f'{x:g}' for x in args.lrs)}; target: "
              + (f"{args.target_loss:g}" if args.target_loss is not None else
                 f"{TARGET_FACTOR} x BSP's best final test loss in the scenario")
              + "\n\nversions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "\n\n"
              "ratio to BSP = BSP time to target / model time (>1 = faster); total wait = sum over workers "
              "of time held by the sync policy (allreduce: time in Allreduce beyond the fastest rank). "
              "sklearn: one process, eta0 = lr / batch size, same run in every scenario"
              + (f", cut after {args.sklearn_max_s:g} s of training" if args.sklearn_max_s > 0 else "") + ".\n")
    text = header + "\n" + "\n".join(sections)
    (out / "results.md").write_text(text)
    print(text)
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in records]
    (out / "results.json").write_text(json.dumps({
        "benchmark": "sync", "command": command, "ranks": args.ranks, "seed": args.seed, "nproc": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "harness_wall_s": wall,
        "workload": workload, "lrs": args.lrs, "models": models, "target_rule": f"{TARGET_FACTOR} x BSP best final",
        "target_loss_override": args.target_loss, "versions": versions,
        "scenarios": {s: SCENARIOS[s] for s in scenarios}, "tables": tables, "runs": public}, indent=2))
    print(f"results: {out / 'results.md'}, {out / 'results.json'}", file=sys.stderr)
    return 1 if missing else 0
