"""``bench sync``: held time to a validation target, and final test figures, of every sync model and baseline.

Protocol, per scenario (all runs at ``--ranks`` ranks, default 5, the same for every model):

1. **Rate selection** (one seed, the first of ``--seeds``): every model runs at every rate of
   ``--lrs`` (at least 4 rates spanning at least 10x); its rate is the one with the lowest final
   *validation* loss (``--val-fraction``: the last F of the training rows, never trained on). A
   choice at either end of the grid widens it: one more rate a grid step beyond that end
   (:func:`next_rate`), up to ``--widen`` times (default 3), until the best rate is inside; one
   still at the edge after that is flagged in the results ("edge"). Local SGD averages the ranks' parameters (the mean of their deltas)
   where the others add the sum, so its grid is ``--lrs`` x the number of trainers (the same
   effective step sizes); under ``--engine sim`` with N workers the grid is ``--lrs`` x 4/N (N
   workers add N deltas: the same step per sample as the recorded harness's 4 workers at
   ``--lrs``); tables show the rate actually used.
2. **Seeds**: every model runs again at its chosen rate with each other seed of ``--seeds``
   (the selection run counts as the first seed's).
3. **Target**, per seed = 1.03 x the lowest final validation loss of the scenario's BSP runs with
   that seed (the seed also draws the synthetic data, so each seed is its own problem);
   ``--target-loss`` overrides it. The target comes from validation, so times to
   target are measured on the *validation* curve; final loss and accuracy are TEST figures.
4. **Held time to target** (:func:`mpikanel.metrics.time_to_target`): the time after which the
   validation loss stays at or below the target for the rest of the run; a run that ends above
   it has none ("not held"). **First touch** (:func:`mpikanel.metrics.first_touch`): the first
   time it is at or below. Each table cell is the median over seeds with [min-max]; a not-held
   run counts as infinitely late, and a time cell where some seeds never held says "k/n held".

Models: the sync models (``bsp asp ssp:3 esp psp``), ``psp-zipline`` (``--sync psp --psp-wait
idle``: the same PSP plan, fast workers idle while a round closes), the ESP ablations
``esp-noeff`` (no efficiency test: push whenever nothing is in flight), ``esp-noprobe`` (cost
from past push round trips and the last reply's queue) and ``esp-novalue`` (no value term), ``allreduce``
(:mod:`mpikanel.baselines.allreduce_sgd`: sum of the deltas every step) and ``localsgd-H``
(:mod:`mpikanel.baselines.local_sgd`: H local steps, then the average; H = 1, 4, 16), and, not in
the default list, ``torch-ddp`` (:mod:`mpikanel.baselines.torch_ddp`: PyTorch DistributedDataParallel
over gloo, the peer users would pick instead; needs the ``[peer]`` extra, exit 2 without it; its
grid is ``--lrs`` x the trainers, as DDP averages the gradients). The
baselines have no server, so all R ranks train against the parameter server's R-1 workers.
Every run processes the same work, EPOCHS x training rows samples (``--budget shared``).

Scenarios: homogeneous, straggler (``--slowdown 1:4``), lognormal (``--slowdown lognormal:0.5``),
slow-link (``--link-delay 1:0.03``), congested (``--server-delay 0.004``: a seeded service time
per push on the server, on the same rank count), a changing cluster: slowing (``--slowdown
2:1->4@30%``) and recovering (``--slowdown 1:4->1@50%``), and two meant for 33-65 paced ranks
(``--step-time 0.02``, which paces the baselines' ranks exactly as the parameter server's
workers): server-bound (``--server-delay 0.001``: the server serves fewer pushes
than the workers send) and bandwidth-bound (200k parameters, 100k sparse features x 2 classes,
pushed dense at ``--link-bandwidth '*:4e7'``: 40 ms per push on each worker's link). A homogeneous run whose largest realized
step-time ratio (``per_worker[i].step_time_rel``: seconds per step, compute plus injection and
pacing, relative to the fastest worker) exceeds 1.3 is flagged: CPU contention, not the sync model,
decided it.

Default workload (softmax, 10 classes): ``--synthetic-rows 100000 --synthetic-features 1000
--batch-size 2048 --epochs 10 --val-fraction 0.1 --snapshot-interval 0.1``. See
docs/benchmarks.md for the measured cost of a run. The full harness (the tables in docs/results.md)::

    python -m mpikanel.bench sync --scenario homogeneous straggler slow-link --seeds 0 1 2 \\
        --out docs/results/sync

``--quick`` is a tiny workload for tests and smoke runs. Results: ``DIR/results.md`` and
``DIR/results.json`` (git commit, versions, load average before and after, nproc, the exact
command), each run's metrics file ``DIR/<scenario>-<model>-lr<lr>-s<seed>.h5`` and plots.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..comm.environment import mpiexec_launch
from ..errors import InputError
from ..lr_schedule import SCHEDULES as LR_SCHEDULES
from ..metrics import first_touch, read_metrics, time_to_target
from ..sync import SYNC_MODELS
from .launch import MpiexecNotFound, find_mpiexec, rank_env
from .provenance import default_out, git_commit

#: scenario -> extra mpikanel.train flags (without the leading --)
SCENARIOS: dict[str, dict[str, str]] = {
    "homogeneous": {},
    "straggler": {"slowdown": "1:4"},
    "lognormal": {"slowdown": "lognormal:0.5"},
    "slow-link": {"link-delay": "1:0.03"},     # ~10x a ~3 ms exchange of the default workload
    # a service time per push on the server (~ a step's compute): pushes queue at the server
    "congested": {"server-delay": "0.004"},
    # a changing cluster: worker 2 turns 4x slower at 30% of its steps; worker 1 recovers at half
    "slowing": {"slowdown": "2:1->4@30%"},
    "recovering": {"slowdown": "1:4->1@50%"},
    # where ESP's judgement must matter, at 33-65 paced ranks (--step-time 0.02): 1 ms of service per
    # push serves 1,000 pushes/s against the 1,600-3,200/s that 32-64 workers send
    "server-bound": {"server-delay": "0.001"},
    # 200k parameters (100k sparse features x 2 classes) pushed dense, 1.6 MB at 40 MB/s per worker's
    # link: a push's 40 ms on the link is two paced steps
    "bandwidth-bound": {"data": "synthetic-sparse", "synthetic-features": "100000", "push": "dense",
                        "link-bandwidth": "*:4e7"},
}
DEFAULT_SCENARIOS = ("homogeneous", "straggler", "slow-link")
WORKLOAD = {"synthetic-rows": "100000", "synthetic-features": "1000", "batch-size": "2048",
            "epochs": "10", "snapshot-interval": "0.1"}
QUICK = {"synthetic-rows": "6000", "synthetic-features": "20", "batch-size": "64",
         "epochs": "3", "snapshot-interval": "0.02"}
#: the grid of the recorded harness (docs/results/sync): BSP's best rate, 1, sits inside it
DEFAULT_LRS = (0.4, 1.0, 2.0, 4.0)
DEFAULT_MODELS = ("bsp", "asp", "ssp:3", "esp", "esp-noeff", "psp", "psp-zipline", "allreduce",
                  "localsgd-1", "localsgd-4", "localsgd-16")
BASELINE_MODULES = {"allreduce": "mpikanel.baselines.allreduce_sgd", "localsgd": "mpikanel.baselines.local_sgd",
                    "torch-ddp": "mpikanel.baselines.torch_ddp"}
#: bench models that need an optional extra, not in DEFAULT_MODELS: model -> (importable module, the install)
EXTRA_MODELS = {"torch-ddp": ("torch", "pip install 'mpikanel[peer]'")}
#: named ablations of a sync model: the same model with one mechanism switched off
ABLATIONS = {"psp-zipline": ("--sync", "psp", "--psp-wait", "idle"),
             "esp-noeff": ("--sync", "esp", "--esp-efficiency", "off"),
             "esp-noprobe": ("--sync", "esp", "--esp-probe", "off"),
             "esp-novalue": ("--sync", "esp", "--esp-value", "off"),
             # the variant with a floor on the value: skip while under 2 typical steps' worth
             "esp-floor": ("--sync", "esp", "--esp-value-low", "2"),
             # gap-aware damping of a stale delta's rate at the server (--staleness-lr gap)
             "esp-gap": ("--sync", "esp", "--staleness-lr", "gap"),
             "asp-gap": ("--sync", "asp", "--staleness-lr", "gap"),
             # the value alone, no cost (LAG/Gaia-style): push once 2 typical steps' worth is unsent
             "lag": ("--sync", "esp", "--esp-lag", "2")}
#: what the ':ARG' of a model spec sets: ssp:3 (staleness), esp:inverse, psp:normalized
MODEL_ARG = {"ssp": "--staleness", "esp": "--esp-scale", "psp": "--psp-aggregate"}
TARGET_FACTOR = 1.03
#: --engine sim scales the rate grid by this over the worker count (the recorded harness's 4 workers)
REFERENCE_WORKERS = 4
CONTENTION_RATIO = 1.3
MIN_GRID, MIN_SPAN = 4, 10.0
HEADERS = ("model", "lr", "held time to target s (val)", "ratio to BSP", "pushes to target", "MB to target",
           "first touch s (val)", "final test loss", "final test acc", "total wait s", "wall s", "samples",
           "max step-time ratio")


# ---------------------------------------------------------------- models and commands

@dataclass(frozen=True)
class ModelRun:
    """How to launch one bench model: module, its flags, and the factor on the rate grid."""

    module: str
    flags: tuple[str, ...]
    lr_scale: float = 1.0


def model_run(model: str, ranks: int) -> ModelRun:
    """The launch recipe of a bench model name (sync[:ARG], an ablation, allreduce, localsgd-H)."""
    name, _, arg = model.partition(":")
    if model in ABLATIONS:
        return ModelRun("mpikanel.train", ABLATIONS[model])
    if model == "allreduce":
        return ModelRun(BASELINE_MODULES["allreduce"], ())
    if model == "torch-ddp":
        # DDP averages the gradients: the same effective step sizes as allreduce's grid x the trainers
        return ModelRun(BASELINE_MODULES["torch-ddp"], (), float(ranks))
    if name.startswith("localsgd-"):
        return ModelRun(BASELINE_MODULES["localsgd"], ("--local-steps", name.split("-", 1)[1]), float(ranks))
    if name == "ssp":
        arg = arg or "3"
    return ModelRun("mpikanel.train", ("--sync", name, *((MODEL_ARG[name], arg) if arg else ())))


def _model_spec(text: str) -> str:
    """argparse type: a valid bench model name."""
    name, _, arg = text.partition(":")
    steps = name.split("-", 1)[1] if name.startswith("localsgd-") else None
    if steps is not None and not (steps.isdigit() and int(steps) >= 1):
        raise argparse.ArgumentTypeError(f"localsgd-H needs an integer H >= 1, got {text!r}")
    known = name in SYNC_MODELS or text in ABLATIONS or text in ("allreduce", "torch-ddp") or steps is not None
    if not known:
        raise argparse.ArgumentTypeError(f"unknown model {text!r}; choose from {', '.join(SYNC_MODELS)} "
                                         f"(ssp:S, esp:inverse, psp:normalized), {', '.join(ABLATIONS)}, "
                                         "allreduce, localsgd-H, torch-ddp")
    if arg and name not in MODEL_ARG:
        raise argparse.ArgumentTypeError(f"only ssp:S, esp:SCALE and psp:AGGREGATE take a parameter, got {text!r}")
    return text


def check_grid(lrs: Sequence[float]) -> None:
    """InputError unless the rate grid has >= 4 positive rates spanning >= 10x."""
    rates = sorted(set(lrs))
    if len(rates) < MIN_GRID or rates[0] <= 0 or rates[-1] / rates[0] < MIN_SPAN * (1 - 1e-9):
        raise InputError(f"--lrs needs at least {MIN_GRID} distinct positive rates spanning at least "
                         f"{MIN_SPAN:g}x, got {' '.join(f'{x:g}' for x in lrs)}")


# ---------------------------------------------------------------- pure analysis

def choose_rate(records: Sequence[dict]) -> tuple[float | None, str | None]:
    """The rate whose run ends with the lowest final validation loss, and a warning if it is a grid edge.

    `records`: one model's selection runs (one per rate); failed runs never win. (None, None)
    when every run failed.
    """
    ok = [r for r in records if r.get("ok") and _finite(r.get("val_loss"))]
    if not ok:
        return None, None
    best = min(ok, key=lambda r: r["val_loss"])
    grid = sorted(r["lr"] for r in records)
    edge = "lowest" if best["lr"] == grid[0] else "highest" if best["lr"] == grid[-1] else None
    return best["lr"], (None if edge is None else f"best rate {best['lr']:g} is the {edge} of the grid")


def next_rate(rates: Sequence[float], best: float | None) -> float | None:
    """The rate one grid step beyond the edge that `best` sits on (the ratio of that end's two
    rates, at least 2x), or None when `best` is inside the grid, missing, or the grid too small."""
    grid = sorted(set(rates))
    if best is None or len(grid) < 2 or grid[0] < best < grid[-1]:
        return None
    if best == grid[-1]:
        return float(f"{best * max(2.0, grid[-1] / grid[-2]):.6g}")
    return float(f"{best / max(2.0, grid[1] / grid[0]):.6g}")


def target_from(records: Iterable[dict], factor: float = TARGET_FACTOR) -> float | None:
    """factor x the lowest final validation loss of the BSP runs (of any run without BSP); None if none."""
    ok = [r for r in records if r.get("ok") and _finite(r.get("val_loss"))]
    bsp = [r for r in ok if r["model"] == "bsp"] or ok
    return factor * min(r["val_loss"] for r in bsp) if bsp else None


def targets_by_seed(records: Iterable[dict], factor: float = TARGET_FACTOR) -> dict[int, float | None]:
    """Each seed's target: factor x the lowest final validation loss of that seed's BSP runs. The
    seed also draws the synthetic data, so each seed is its own problem with its own best loss: one
    target for all seeds (from the best seed) would be out of reach for the others by seed noise alone."""
    records = list(records)
    return {seed: target_from([r for r in records if r["seed"] == seed], factor)
            for seed in sorted({r["seed"] for r in records})}


def mark_times(record: dict, target: float | None) -> None:
    """Set the run's held time to target and first-touch time on its validation curve (None: never)."""
    t, loss = record.get("_val_curve", ((), ()))
    ok = target is not None and len(t) > 0
    record["held_s"] = time_to_target(t, loss, target) if ok else None
    record["touch_s"] = first_touch(t, loss, target) if ok else None
    record["pushes_to_target"] = record["mb_to_target"] = None
    pushes = record.get("_pushes_curve")
    if record["held_s"] is not None and pushes is not None and len(pushes[0]):
        # deltas applied by the held time (interpolated between snapshots); bytes at the run's mean per push
        n = float(np.interp(record["held_s"], *pushes))
        record["pushes_to_target"] = n
        record["mb_to_target"] = n * record["bytes_per_push"] / 1e6 if record.get("bytes_per_push") else None


@dataclass(frozen=True)
class Spread:
    """Median and range over seeds; None values (never reached) count as infinitely late."""

    median: float
    low: float
    high: float
    n: int
    missing: int


def spread(values: Sequence[float | None]) -> Spread | None:
    """Median, min and max of `values` with None as +inf; None for no values."""
    if not values:
        return None
    xs = sorted(math.inf if v is None else float(v) for v in values)
    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return Spread(median, xs[0], xs[-1], len(xs), sum(1 for v in values if v is None))


def _num(x: float, spec: str, never: str) -> str:
    if math.isinf(x):
        return never
    # "time": 3 significant digits, so the simulator's short runs at many workers keep theirs
    return format(x, "#.3g").rstrip(".") if spec == "time" else format(x, spec)


def format_spread(values: Sequence[float | None], spec: str = ".4f", never: str = "n/a") -> str:
    """'median [min-max]' over seeds (a single value alone); '-' for none."""
    s = spread(values)
    if s is None:
        return "-"
    med = _num(s.median, spec, never)
    if s.n == 1:
        return med
    return f"{med} [{_num(s.low, spec, never)}-{_num(s.high, spec, never)}]"


def format_time(values: Sequence[float | None], what: str = "held") -> str:
    """A time-to-target cell: median [min-max] over seeds, 'not held' for None, '(k/n held)' if some never did."""
    s = spread(values)
    if s is None:
        return "-"
    never = f"not {what}"
    if s.missing == s.n:
        return f"{never} (0/{s.n})"
    text = format_spread(values, "time", never)
    return text if s.missing == 0 else f"{text} ({s.n - s.missing}/{s.n} {what})"


def ratio_to(reference: Sequence[float | None], values: Sequence[float | None]) -> str:
    """Median reference time / median time (>1 = faster than the reference); '-' if either never held."""
    a, b = spread(reference), spread(values)
    if a is None or b is None or math.isinf(a.median) or math.isinf(b.median) or b.median <= 0:
        return "-"
    return f"{a.median / b.median:.2f}"


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


# ---------------------------------------------------------------- running

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the sync benchmark."""
    parser.add_argument("--scenario", nargs="+", action="extend", metavar="NAME",
                        help=f"scenarios: {', '.join(SCENARIOS)} or all (default: {' '.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--models", nargs="+", type=_model_spec, default=None, metavar="MODEL",
                        help=f"models (default: {' '.join(DEFAULT_MODELS)})")
    parser.add_argument("--lrs", nargs="+", type=float, default=list(DEFAULT_LRS),
                        help=f"rate grid, >= {MIN_GRID} rates spanning >= {MIN_SPAN:g}x (local SGD: x trainers)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                        help="seeds of data order and injection; the first selects the rate")
    parser.add_argument("--ranks", type=int, default=5, help="MPI ranks per run (parameter server: 1 server + workers)")
    parser.add_argument("--lr-schedules", nargs="+", default=["constant"], choices=LR_SCHEDULES, metavar="NAME",
                        help="rate schedules over the work budget (constant, linear, cosine): with more than one, "
                             "BSP runs its rate grid under each and the schedule of its best final validation "
                             "loss is used for every model (default constant)")
    parser.add_argument("--warmup", type=float, default=0.0, metavar="F",
                        help="ramp every run's rate up over this fraction of the work budget first (default 0)")
    parser.add_argument("--widen", type=int, default=3, metavar="N",
                        help="when a model's best rate is at the grid's edge, run up to N more rates beyond "
                             "it, one grid step each, until the best is inside (default 3; 0: never)")
    parser.add_argument("--val-fraction", type=float, default=0.1,
                        help="last F of the training rows held out for rate choice and target")
    parser.add_argument("--target-loss", type=float, default=None,
                        help=f"validation target (default: {TARGET_FACTOR} x BSP's best final validation loss)")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: runs/bench-sync-<timestamp>)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds allowed per run")
    parser.add_argument("--quick", action="store_true", help="tiny workload (tests, smoke runs)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rebuild --out's results.md, plots and results.json from its runs "
                             "(metrics files next to results.json), keeping the original command, commit and loads")
    parser.add_argument("--engine", choices=("mpi", "sim"), default="mpi",
                        help="real ranks under mpiexec, or the simulator (python -m mpikanel.sim) on a virtual clock")
    parser.add_argument("--workers", type=int, nargs="+", default=None,
                        help="--engine sim: worker counts, one table set each (default: --ranks - 1)")
    parser.add_argument("--step-time", type=float, default=None,
                        help="modeled seconds per step: --engine sim models every step so (default: measured by "
                             "each run), --engine mpi paces every run's trainers, the parameter server's workers "
                             "and the baselines' ranks alike (default: unpaced)")
    for key in ("synthetic-rows", "synthetic-features", "batch-size", "epochs"):
        parser.add_argument(f"--{key}", type=int, default=None, help=f"workload override (default {WORKLOAD[key]})")
    parser.add_argument("--snapshot-interval", type=float, default=None,
                        help=f"seconds between curve points (default {WORKLOAD['snapshot-interval']}; "
                             "--engine sim: x 4/N at N workers, whose runs are that much shorter)")
    parser.add_argument("--data", default=None, metavar="DATA",
                        help="workload override: what every run trains on, as mpikanel.train's --data "
                             "(e.g. fashion-mnist; default synthetic, whose --synthetic-* flags are then dropped)")
    parser.add_argument("--train-model", default=None, metavar="MODEL",
                        help="workload override: what every run trains, as mpikanel.train's --model "
                             "(e.g. py:examples/jax_cnn.py:make_model; default softmax)")
    parser.add_argument("--input-shape", default=None, metavar="C,H,W",
                        help="workload override: mpikanel.train's --input-shape, for a py: model")
    parser.add_argument("--curve-points", type=int, default=None, metavar="N",
                        help="workload override: a py: model's curve points (mpikanel.train's --curve-points, "
                             "default 8): the held time's resolution")
    parser.add_argument("--slowdown", default=None, metavar="SPEC",
                        help="replace the scenario's --slowdown (straggler: 1:4), e.g. 1:3 for a 3x straggler")


def _flags(values: dict[str, str]) -> list[str]:
    return [x for key, value in values.items() for x in (f"--{key}", str(value))]


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


def run_flags(args: argparse.Namespace, scenario: str) -> dict[str, str]:
    """The scenario's flags of every run, with --step-time when given (every model is paced alike)."""
    step_time, slowdown = getattr(args, "step_time", None), getattr(args, "slowdown", None)
    flags = {**SCENARIOS[scenario], **({"step-time": f"{step_time:g}"} if step_time else {})}
    if slowdown and "slowdown" in flags:
        flags["slowdown"] = slowdown
    return flags


def run_command(args: argparse.Namespace, out: Path, scenario: str, model: str, lr: float, seed: int,
                workload: dict[str, str]) -> tuple[list[str], Path]:
    """The mpiexec command line of one run and its metrics path."""
    recipe = model_run(model, args.ranks)
    stem = f"{scenario}-{model.replace(':', '')}-lr{lr:g}-s{seed}" + (f"-{workload['lr-schedule']}"
                                                                      if "lr-schedule" in workload else "")
    if args.engine == "sim":
        launch = [sys.executable, "-m", "mpikanel.sim", "--workers", str(args.ranks - 1)]
    else:
        launch, _ = mpiexec_launch(["python", "-m", recipe.module], ["-n", str(args.ranks)], env=rank_env(None))
    cmd = [*launch, *recipe.flags,
           *_flags(workload), "--val-fraction", f"{args.val_fraction:g}", "--lr", f"{lr:g}", "--seed", str(seed),
           *_flags(run_flags(args, scenario)), "--scenario", scenario, "--metrics", str(out / f"{stem}.h5"), "--quiet"]
    return cmd, out / f"{stem}.h5"


def run_one(args: argparse.Namespace, out: Path, scenario: str, model: str, lr: float, seed: int,
            workload: dict[str, str]) -> dict:
    """Launch one run and return its record (loaded from the metrics file when it succeeded)."""
    cmd, metrics = run_command(args, out, scenario, model, lr, seed, workload)
    t0 = time.perf_counter()
    code, err = _execute(cmd, args.timeout)
    record = {"scenario": scenario, "model": model, "lr": lr, "seed": seed, "metrics": str(metrics),
              "schedule": workload.get("lr-schedule", "constant"),
              "command": cmd, "exit_code": code, "elapsed_s": time.perf_counter() - t0, "ok": code == 0}
    if code != 0:
        record["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
    else:
        load_record(record)
    status = (f"wall {record['wall_s']:.2f} s, val {record['val_loss']:.4f}" if record["ok"]
              else record.get("error"))
    print(f"  {scenario:<12} {model:<12} lr {lr:<6g} seed {seed} {record['elapsed_s']:6.1f} s  {status}",
          file=sys.stderr, flush=True)
    return record


def load_record(record: dict) -> None:
    """Add the final figures, wait, samples, step-time ratio and the validation curve from the metrics file."""
    try:
        m = read_metrics(record["metrics"])
    except InputError as exc:
        record.update(ok=False, error=str(exc))
        return
    s, workers, curve = m["summary"], m["workers"], m["curve"]
    if "val_loss" not in curve:
        record.update(ok=False, error="no validation curve in the metrics file")
        return
    record.update(val_loss=s.get("val_loss"), test_loss=s["test_loss"], test_accuracy=s["test_accuracy"],
                  wall_s=s["wall_s"], total_wait_s=sum(float(w.get("wait_s", 0.0)) for w in workers),
                  samples=s.get("samples"), step_time_ratio=max_step_ratio(workers),
                  pacing_held=s.get("pacing_held"), pacing_missed_share=s.get("pacing_missed_share"),
                  load_avg=(s.get("load_avg_before"), s.get("load_avg_after")),
                  mpi_library=s.get("versions", {}).get("mpi", ""))
    per_worker = s.get("per_worker") or []
    if per_worker and per_worker[0].get("rtt_mean_s"):
        # worker 1 is the one the scenarios slow down (straggler, slow link)
        record["rtt1_s"] = float(per_worker[0]["rtt_mean_s"])
    if s.get("server_probes"):
        record["probes"] = int(s["server_probes"])
        record["probe_server_us"] = 1e6 * float(s["server_probe_s"]) / int(s["server_probes"])
        rtts = [float(w["probe_rtt_mean_s"]) for w in per_worker if w.get("probes")]
        record["probe_rtt_ms"] = 1e3 * float(np.median(rtts)) if rtts else None
    psp = s.get("psp")
    if psp and psp.get("rounds"):
        record.update(psp_error=float(psp["median_relative_error"]), psp_error_p90=float(psp["p90_relative_error"]),
                      psp_fallback=float(psp["fallback_share"]))
    record["_val_curve"] = (list(curve["time_s"]), list(curve["val_loss"]))
    if "pushes" in curve and np.any(curve["pushes"]):      # baselines have no server: all zeros
        record["_pushes_curve"] = (list(curve["time_s"]), [float(x) for x in curve["pushes"]])
    record["bytes_per_push"] = s.get("bytes_per_push")


def max_step_ratio(workers: Sequence[dict]) -> float | None:
    """The largest realized step-time ratio over the workers (step_time_rel, else compute+injected per step)."""
    if workers and all("step_time_rel" in w for w in workers):
        return max(float(w["step_time_rel"]) for w in workers)
    per_step = [(w["compute_s"] + w["injected_s"]) / w["steps"] for w in workers if w.get("steps")]
    return max(per_step) / min(per_step) if per_step and min(per_step) > 0 else None


def _scenarios(args: argparse.Namespace) -> list[str]:
    names = args.scenario or list(DEFAULT_SCENARIOS)
    if "all" in names:
        return list(SCENARIOS)
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        raise InputError(f"unknown scenario(s) {', '.join(bad)}; choose from {', '.join(SCENARIOS)} or all")
    return list(dict.fromkeys(names))


def _workload(args: argparse.Namespace) -> dict[str, str]:
    workload = dict(QUICK if args.quick else WORKLOAD)
    for key in ("synthetic-rows", "synthetic-features", "batch-size", "epochs", "snapshot-interval"):
        value = getattr(args, key.replace("-", "_"), None)
        if value is not None:
            workload[key] = str(value)
    if getattr(args, "warmup", 0):
        workload["warmup"] = f"{args.warmup:g}"
    for key, flag in (("data", "data"), ("train_model", "model"), ("input_shape", "input-shape"),
                      ("curve_points", "curve-points")):
        value = getattr(args, key, None)
        if value is not None:
            workload[flag] = str(value)
    if not workload.get("data", "synthetic").startswith("synthetic"):
        for key in ("synthetic-rows", "synthetic-features"):
            workload.pop(key, None)
    return workload


def _check_args(args: argparse.Namespace) -> None:
    if not args.quick:
        check_grid(args.lrs)
    if not 0 < args.val_fraction < 1:
        raise InputError(f"--val-fraction must be in (0, 1): the rate and the target come from validation, "
                         f"got {args.val_fraction:g}")
    if len(set(args.seeds)) != len(args.seeds):
        raise InputError(f"--seeds must be distinct, got {' '.join(map(str, args.seeds))}")
    if args.engine == "mpi":
        find_mpiexec()
    check_extras(args.models or DEFAULT_MODELS)


def check_extras(models: Iterable[str]) -> None:
    """InputError naming the install when a model's optional extra (torch-ddp: PyTorch) is missing."""
    import importlib.util

    for model in dict.fromkeys(models):
        if model in EXTRA_MODELS and importlib.util.find_spec(EXTRA_MODELS[model][0]) is None:
            module, install = EXTRA_MODELS[model]
            raise InputError(f"model {model} needs {module}, which is not installed: {install}")


def results_dir(args: argparse.Namespace) -> str | None:
    """--out, or runs/bench-sync[-sim]-TIME; None for --report-only (it keeps the run's provenance)."""
    if args.report_only:
        return None
    return args.out or default_out("bench-sync-sim" if args.engine == "sim" else "bench-sync")


def run(args: argparse.Namespace) -> int:
    """One bench per engine setting: real ranks, or the simulator at each --workers count."""
    if args.report_only:
        return rereport(args)
    if args.engine == "mpi":
        return run_engine(args)
    base = Path(args.out)
    models = [m for m in (args.models or DEFAULT_MODELS) if model_run(m, 2).module == "mpikanel.train"]
    skipped = sorted(set(args.models or DEFAULT_MODELS) - set(models))
    if skipped:
        print(f"bench sync --engine sim: {', '.join(skipped)} have no simulated form (MPI programs "
              "without a server); left out", file=sys.stderr)
    code = 0
    for n in args.workers or [args.ranks - 1]:
        # the same work over N workers ends about N/4 times sooner: keep the curve's resolution
        interval = (args.snapshot_interval or float(_workload(args)["snapshot-interval"])) * REFERENCE_WORKERS / n
        sub = argparse.Namespace(**{**vars(args), "ranks": n + 1, "models": models, "out": str(base / f"workers-{n}"),
                                    "snapshot_interval": float(f"{interval:.3g}")})
        code = max(code, run_engine(sub))
    return code


def run_engine(args: argparse.Namespace) -> int:
    """Rate selection, seeds, report; 1 if a model has no good run in a scenario, 2 on bad flags."""
    t_start, load_before = time.perf_counter(), os.getloadavg()
    try:
        scenarios, workload = _scenarios(args), _workload(args)
        models = list(dict.fromkeys(args.models or DEFAULT_MODELS))
        _check_args(args)
    except (InputError, MpiexecNotFound) as exc:
        print(f"mpikanel bench sync: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_runs = len(scenarios) * len(models) * (len(args.lrs) + len(args.seeds) - 1)
    print(f"bench sync: {n_runs} runs ({len(scenarios)} scenarios x {len(models)} models x "
          f"({len(args.lrs)} rates + {len(args.seeds) - 1} seeds))", file=sys.stderr, flush=True)
    records, choices, args.schedules, schedule_runs = [], {}, {}, []
    for scenario in scenarios:
        scheduled, bsp_selected, others, args.schedules[scenario] = pick_schedule(args, out, scenario, workload)
        schedule_runs += others
        for model in models:
            choices[scenario, model], runs = select_and_repeat(args, out, scenario, model, scheduled,
                                                               bsp_selected if model == "bsp" else None)
            records += runs
    args.schedule_runs = [{k: v for k, v in r.items() if not k.startswith("_")} for r in schedule_runs]
    return report(args, out, scenarios, models, workload, records, choices, t_start, load_before)


def rereport(args: argparse.Namespace) -> int:
    """Rebuild a finished bench's report from its results.json and metrics files (no runs)."""
    if not args.out or not (Path(args.out) / "results.json").is_file():
        print("mpikanel bench sync: error: --report-only needs --out DIR holding a results.json", file=sys.stderr)
        return 2
    out = Path(args.out)
    old = json.loads((out / "results.json").read_text())
    records = old["runs"]
    for r in records:
        r["metrics"] = str(out / Path(r["metrics"]).name)       # the directory may have moved
        if r["ok"]:
            load_record(r)
    scenarios, models = list(old["tables"]), old["models"]
    choices = {(sc, m): old["tables"][sc]["chosen"][m] for sc in scenarios for m in models}
    for key in ("ranks", "seeds", "lrs", "val_fraction", "step_time", "slowdown"):
        setattr(args, key, old.get(key))
    args.schedules, args.schedule_runs = old.get("schedules", {}), old.get("schedule_runs", [])
    keep = {k: old[k] for k in ("command", "git_commit", "versions", "nproc", "load_average_before",
                                "load_average_after", "harness_wall_s", "n_runs") if k in old}
    keep["report_rebuilt_at_commit"] = git_commit()
    return report(args, out, scenarios, models, old["workload"], records, choices, 0.0, (), meta_override=keep)


def rates_for(args: argparse.Namespace, model: str) -> list[float]:
    """The model's rate grid: --lrs, times the trainer count for local SGD; under the simulator,
    times REFERENCE_WORKERS / N (N workers add N deltas: the same step per sample as 4 at --lrs)."""
    scale = model_run(model, args.ranks).lr_scale
    if getattr(args, "engine", "mpi") == "sim":
        scale *= REFERENCE_WORKERS / (args.ranks - 1)
    return [float(f"{lr * scale:.6g}") for lr in args.lrs]


Selection = tuple[list[dict], "float | None", "str | None"]


def select(args: argparse.Namespace, out: Path, scenario: str, model: str, workload: dict[str, str]) -> Selection:
    """The rate grid with the first seed (widened while the best rate is at its edge): the runs,
    the chosen rate and the edge warning."""
    first = args.seeds[0]
    grid = [run_one(args, out, scenario, model, lr, first, workload) for lr in rates_for(args, model)]
    lr, warning = choose_rate(grid)
    for _ in range(args.widen if warning else 0):     # a best rate at the edge: one more rate beyond it
        extra = next_rate([r["lr"] for r in grid], lr)
        if extra is None:
            break
        grid.append(run_one(args, out, scenario, model, extra, first, workload))
        lr, warning = choose_rate(grid)
        if warning is None:
            break
    for r in grid:
        r["phase"] = "selection"
    return grid, lr, warning


def select_and_repeat(args: argparse.Namespace, out: Path, scenario: str, model: str, workload: dict[str, str],
                      selected: Selection | None = None) -> tuple[dict, list[dict]]:
    """Run the rate grid with the first seed (or take `selected`), choose the rate, run it with the other seeds."""
    grid, lr, warning = selected or select(args, out, scenario, model, workload)
    repeats = [] if lr is None else [run_one(args, out, scenario, model, lr, s, workload) for s in args.seeds[1:]]
    return {"lr": lr, "warning": warning}, grid + repeats


def best_schedule(selections: dict[str, Selection]) -> str | None:
    """The schedule whose BSP selection grid reached the lowest final validation loss (None: all failed)."""
    best = {name: min((r["val_loss"] for r in grid if r["ok"] and r["lr"] == lr), default=math.inf)
            for name, (grid, lr, _) in selections.items() if lr is not None}
    return min(best, key=best.get) if best else None


def pick_schedule(args: argparse.Namespace, out: Path, scenario: str,
                  workload: dict[str, str]) -> tuple[dict[str, str], Selection | None, list[dict], dict]:
    """The rate schedule for every model of a scenario, chosen on BSP's validation loss among
    --lr-schedules (one BSP rate grid each, first seed): the workload with it, BSP's selection
    under it, the other schedules' runs, and what was tried."""
    if len(args.lr_schedules) == 1:
        only = args.lr_schedules[0]
        return _with_schedule(workload, only), None, [], {"chosen": only, "tried": {}}
    selections = {name: select(args, out, scenario, "bsp", _with_schedule(workload, name))
                  for name in args.lr_schedules}
    chosen = best_schedule(selections) or args.lr_schedules[0]
    others = [dict(r, phase="schedule") for name, (grid, _, _) in selections.items() if name != chosen for r in grid]
    tried = {name: next((r["val_loss"] for r in grid if r["ok"] and r["lr"] == lr), None)
             for name, (grid, lr, _) in selections.items()}
    return _with_schedule(workload, chosen), selections[chosen], others, {"chosen": chosen, "tried": tried}


def _with_schedule(workload: dict[str, str], schedule: str) -> dict[str, str]:
    return {**workload, "lr-schedule": schedule} if schedule != "constant" else dict(workload)


# ---------------------------------------------------------------- report

def _chosen_runs(records: list[dict], scenario: str, model: str, lr: float | None) -> list[dict]:
    """The runs of (scenario, model) at the chosen rate: one per seed."""
    return [r for r in records if r["scenario"] == scenario and r["model"] == model and r["lr"] == lr]


def table_row(model: str, choice: dict, runs: list[dict], bsp_held: list[float | None]) -> list[str]:
    """One table row: medians [min-max] over the seeds' runs at the chosen rate."""
    ok = [r for r in runs if r["ok"]]
    if choice["lr"] is None or not ok:
        return [model, "-", "failed"] + ["-"] * (len(HEADERS) - 3)
    held = [r["held_s"] for r in ok]

    def col(key: str, spec: str) -> str:
        return format_spread([r[key] for r in ok if r.get(key) is not None], spec)

    seeds = f" ({len(ok)}/{len(runs)} seeds ok)" if len(ok) < len(runs) else ""
    if model_run(model, 2).module == "mpikanel.train":
        pushes = [format_spread([r.get("pushes_to_target") for r in ok], ".0f", "not held"),
                  format_spread([r.get("mb_to_target") for r in ok], ".3g", "not held")]
    else:  # a baseline: no server, nothing pushed
        pushes = ["-", "-"]
    return [model, f"{choice['lr']:g}" + (" (edge)" if choice["warning"] else "") + seeds, format_time(held),
            ratio_to(bsp_held, held), *pushes,
            format_time([r["touch_s"] for r in ok], "touched"),
            col("test_loss", ".4f"), col("test_accuracy", ".4f"), col("total_wait_s", "time"),
            col("wall_s", "time"), col("samples", ".0f"), col("step_time_ratio", ".2f")]


def markdown_table(headers: Sequence[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def selection_table(records: list[dict], scenario: str, models: list[str], choices: dict) -> str:
    """Final validation loss of every selection run (chosen rate in bold): a row per model, a column per rate."""
    rows, width = [], 0
    for model in models:
        grid = sorted((r for r in records
                       if r["scenario"] == scenario and r["model"] == model and r.get("phase") == "selection"),
                      key=lambda r: r["lr"])
        width = max(width, len(grid))
        chosen = choices[scenario, model]["lr"]
        rows.append([model] + [_bold(f"{r['lr']:g}: " + (f"{r['val_loss']:.4f}" if r["ok"] else "failed"),
                                     r["lr"] == chosen) for r in grid])
    rows = [row + [""] * (width + 1 - len(row)) for row in rows]
    return markdown_table(["model"] + [f"rate {i + 1}: val loss" for i in range(width)], rows)


def _bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def scenario_notes(records: list[dict], scenario: str, models: list[str], choices: dict) -> list[str]:
    """Edge warnings, failed runs and (homogeneous) contention flags of one scenario."""
    notes = [f"- {m}: {choices[scenario, m]['warning']}, after widening as far as --widen allows (widen --lrs)"
             for m in models
             if choices[scenario, m]["warning"]]
    runs = [r for r in records if r["scenario"] == scenario]
    notes += [f"- {r['model']} lr {r['lr']:g} seed {r['seed']}: {r.get('error')}" for r in runs if not r["ok"]]
    notes += [f"- {r['model']} lr {r['lr']:g} seed {r['seed']}: pacing not held ({r['pacing_missed_share']:.0%} "
              "of steps computed longer than modeled)" for r in runs if r["ok"] and r.get("pacing_held") is False]
    notes += esp_notes(records, scenario, models, choices)
    notes += psp_notes(records, scenario, models, choices)
    if scenario == "homogeneous":
        flagged = [r for r in runs if r["ok"] and (r.get("step_time_ratio") or 0) > CONTENTION_RATIO]
        if flagged:
            ratios = [r["step_time_ratio"] for r in flagged]
            notes.append(f"- contention: {len(flagged)} of {sum(r['ok'] for r in runs)} runs have a max realized "
                         f"step-time ratio above {CONTENTION_RATIO} ({min(ratios):.2f}-{max(ratios):.2f}) without "
                         "injection: CPU contention, not the sync model, shaped their times"
                         + ("" if len(flagged) > 10 else " (runs: " + ", ".join(
                             f"{r['model']} lr {r['lr']:g} s{r['seed']}" for r in flagged) + ")"))
    return notes


def psp_notes(records: list[dict], scenario: str, models: list[str], choices: dict) -> list[str]:
    """PSP's prediction at its chosen rate: the median and p90 relative arrival error and the share
    of fallback rounds (per run, then median [min-max] over seeds), and its waiting against BSP's."""
    notes = []
    bsp = [r for r in _chosen_runs(records, scenario, "bsp", choices[scenario, "bsp"]["lr"]) if r["ok"]] \
        if ("bsp" in models and (scenario, "bsp") in choices) else []
    for m in models:
        runs = [r for r in _chosen_runs(records, scenario, m, choices[scenario, m]["lr"])
                if r["ok"] and r.get("psp_error") is not None]
        if not runs:
            continue
        text = (f"- {m}: prediction error median {format_spread([r['psp_error'] for r in runs], '.3f')}, "
                f"p90 {format_spread([r['psp_error_p90'] for r in runs], '.3f')}; fallback rounds "
                f"{format_spread([100 * r['psp_fallback'] for r in runs], '.1f')}%")
        wait, base = spread([r["total_wait_s"] for r in runs]), spread([r["total_wait_s"] for r in bsp])
        if wait is not None and base is not None and base.median > 0:
            text += f"; total wait {wait.median / base.median:.2f}x BSP's"
        notes.append(text)
    return notes


def esp_notes(records: list[dict], scenario: str, models: list[str], choices: dict) -> list[str]:
    """ESP's own measurements at its chosen rate: worker 1's round trip against the injected link
    delay plus the unloaded round trip (homogeneous), and what a probe costs."""
    notes = []
    link = SCENARIOS[scenario].get("link-delay", "")
    injected = float(link.partition(":")[2]) if link.startswith("1:") else 0.0
    for m in models:
        if not (m == "esp" or m.startswith("esp-")):
            continue
        runs = [r for r in _chosen_runs(records, scenario, m, choices[scenario, m]["lr"]) if r["ok"]]
        base_runs = [r for r in records if r["scenario"] == "homogeneous" and r["model"] == m and r["ok"]
                     and r.get("rtt1_s")]
        rtt = [r["rtt1_s"] for r in runs if r.get("rtt1_s")]
        if rtt:
            text = f"- {m}: worker 1's mean push round trip {1e3 * float(np.median(rtt)):.1f} ms"
            if injected:
                base = float(np.median([r["rtt1_s"] for r in base_runs])) if base_runs else None
                text += (f" against the injected {1e3 * injected:.0f} ms" +
                         (f" + the unloaded {1e3 * base:.1f} ms (homogeneous) = {1e3 * (injected + base):.1f} ms"
                          if base is not None else " (no homogeneous run for the unloaded round trip)"))
            notes.append(text)
        probed = [r for r in runs if r.get("probes")]
        if probed:
            rtts = [r["probe_rtt_ms"] for r in probed if r.get("probe_rtt_ms") is not None]
            notes.append(f"- {m}: {int(np.median([r['probes'] for r in probed]))} probes per run, probe round trip "
                         f"{float(np.median(rtts)) if rtts else float('nan'):.2f} ms (median over workers and seeds), "
                         f"server CPU {float(np.median([r['probe_server_us'] for r in probed])):.1f} µs per probe")
    return notes


def scenario_section(args: argparse.Namespace, out: Path, scenario: str, models: list[str],
                     records: list[dict], choices: dict) -> tuple[str, dict, bool]:
    """Markdown of one scenario, its JSON table, and whether every model has a good run."""
    runs = [r for r in records if r["scenario"] == scenario]
    targets = ({seed: args.target_loss for seed in args.seeds} if args.target_loss is not None
               else targets_by_seed(runs))
    for r in runs:
        mark_times(r, targets.get(r["seed"]))
    target = targets.get(args.seeds[0])         # the plotted runs are the first seed's
    chosen = {m: _chosen_runs(records, scenario, m, choices[scenario, m]["lr"]) for m in models}
    bsp_held = [r["held_s"] for r in chosen.get("bsp", []) if r["ok"]]
    rows = [table_row(m, choices[scenario, m], chosen[m], bsp_held) for m in models]
    notes = scenario_notes(records, scenario, models, choices)
    plots = _plots(out, scenario, {m: chosen[m][0] for m in models if chosen[m] and chosen[m][0]["ok"]}, target,
                   args.ranks)
    flags = " ".join(_flags(run_flags(args, scenario))) or "(none)"
    shown = ", ".join(f"seed {k}: {'n/a' if v is None else f'{v:.4f}'}" for k, v in targets.items())
    text = (f"### {scenario}\n\nflags: `{flags}`; validation target {shown}"
            + schedule_line(getattr(args, "schedules", {}).get(scenario)) + f"\n\n{markdown_table(HEADERS, rows)}\n"
            + ("\n" + "\n".join(notes) + "\n" if notes else "")
            + f"\nRate selection (seed {args.seeds[0]}, final validation loss):\n\n"
            + selection_table(records, scenario, models, choices) + "\n"
            + "".join(f"\n![{p}]({p})\n" if p.endswith(".png") else f"\n{p}\n" for p in plots))
    table = {"flags": run_flags(args, scenario), "target_loss": {str(k): v for k, v in targets.items()},
             "plots": plots, "notes": notes,
             "chosen": {m: choices[scenario, m] for m in models},
             "rows": [dict(zip(HEADERS, row)) for row in rows]}
    return text, table, all(any(r["ok"] for r in chosen[m]) for m in models)


def schedule_line(schedule: dict | None) -> str:
    """'; rate schedule X (chosen on BSP's validation: ...)' for a scenario's section ('' when constant, untried)."""
    if not schedule or (schedule["chosen"] == "constant" and not schedule["tried"]):
        return ""
    tried = ", ".join(f"{k} {'failed' if v is None else f'{v:.4f}'}" for k, v in schedule["tried"].items())
    return (f"; rate schedule **{schedule['chosen']}** for every model"
            + (f" (chosen on BSP's final validation loss at its best rate: {tried})" if tried else ""))


def _plots(out: Path, scenario: str, runs_by_model: dict[str, dict], target: float | None, ranks: int) -> list[str]:
    """Validation-loss and timeline charts of each model's first-seed run at its chosen rate."""
    from ..plot import plot_loss_curves, plot_psp_predictions, plot_timeline

    runs = []
    for model, r in runs_by_model.items():
        m = read_metrics(r["metrics"])
        m["attrs"].update(sync=model, scenario=f"lr {r['lr']:g}")
        runs.append(m)
    if not runs:
        return []
    loss, timeline = out / f"{scenario}-val-loss.png", out / f"{scenario}-timeline.png"
    try:
        plot_loss_curves(runs, loss, target, logy=True, keys=("val_loss",),
                         title=f"{scenario}: validation loss vs wall time ({ranks} ranks, chosen rates)")
        plot_timeline(runs, timeline)
        psp = [m for m in runs if m["summary"].get("psp")]
        if psp:
            plot_psp_predictions(psp, out / f"{scenario}-psp-predicted.png")
    except InputError as exc:
        return [f"plots skipped: {exc}"]
    return [loss.name, timeline.name] + ([f"{scenario}-psp-predicted.png"] if psp else [])


def versions(records: list[dict]) -> dict[str, str]:
    """Versions of mpikanel, mpi4py, the MPI library (as the runs reported it), numpy, numba, Python."""
    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    mpi = " ".join(next((r["mpi_library"] for r in records if r.get("mpi_library")), "").split())
    return {"mpikanel": v("mpikanel"), "mpi4py": v("mpi4py"), "mpi_library": mpi, "mpich_wheel": v("mpich"),
            "numpy": v("numpy"), "numba": v("numba"), "python": sys.version.split()[0]}


def _pacing_text(args: argparse.Namespace) -> str:
    """', paced at --step-time S s (...)' for the header ('' unpaced)."""
    if not getattr(args, "step_time", None):
        return ""
    if getattr(args, "engine", "mpi") == "sim":
        return f", every step modeled at --step-time {args.step_time:g} s"
    return (f", paced at --step-time {args.step_time:g} s (every model: the parameter server's workers and the "
            "baselines' ranks alike)")


def _header(args: argparse.Namespace, workload: dict[str, str], meta: dict) -> str:
    la, lb = meta["load_average_before"], meta["load_average_after"]
    return (f"# bench sync\n\ncommand: `{' '.join(meta['command'])}`\n\n"
            f"git commit {meta['git_commit']}; engine {getattr(args, 'engine', 'mpi')}"
            f"{' (virtual clock: times are modeled seconds)' if getattr(args, 'engine', 'mpi') == 'sim' else ''}; "
            f"{args.ranks} ranks"
            + _pacing_text(args)
            + f"; nproc {meta['nproc']}; load average (1/5/15 min) "
            f"before {la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f}, after {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}; "
            f"harness wall {meta['harness_wall_s']:.0f} s over {meta['n_runs']} runs"
            + (f"; report rebuilt at commit {meta['report_rebuilt_at_commit']} (--report-only)"
               if meta.get("report_rebuilt_at_commit") else "") + "\n\n"
            f"workload: `{' '.join(_flags(workload))} --val-fraction {args.val_fraction:g}`; rate grid "
            f"{' '.join(f'{x:g}' for x in args.lrs)} (local SGD: x {args.ranks} trainers"
            + (f"; simulator: x {REFERENCE_WORKERS}/{args.ranks - 1} workers" if getattr(args, "engine", "mpi") == "sim" else "")
            + f"); seeds "
            f"{' '.join(map(str, args.seeds))} (rate chosen with seed {args.seeds[0]} on final validation loss)\n\n"
            f"target: {meta['target_rule']}\n\n"
            "versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + "\n\n"
            "Each cell: median [min-max] over the seeds at the model's chosen rate. Held time to target: on the "
            "validation curve (the target comes from validation), the time after which the validation loss stays "
            "at or below the target; a run ending above it has none (not held, counted as infinitely late in the "
            "median; 'k/n held' when some seeds never held). First touch: first time at or below the target. "
            "Final test loss/acc: TEST split at the end of the run. Ratio to BSP = BSP's median held time / the "
            "model's (>1 = faster). Pushes to target: deltas the server had applied by the held time "
            "(interpolated between curve points; baselines, which have no server, show '-'); MB to target: those "
            "pushes at the run's mean bytes per push. Total wait: sum over workers of time held by the sync policy (baselines: time "
            "in Allreduce beyond the fastest rank). Samples: processed by the whole cluster. Max step-time ratio: "
            "the slowest worker's realized seconds per step (compute + injection + pacing) over the fastest's. Baselines "
            f"train on all {args.ranks} ranks (no server); the parameter server on {args.ranks - 1} workers.\n")


def report(args: argparse.Namespace, out: Path, scenarios: list[str], models: list[str], workload: dict[str, str],
           records: list[dict], choices: dict, t_start: float, load_before: tuple,
           meta_override: dict | None = None) -> int:
    """Tables, plots, results.md and results.json; the exit code. `meta_override` (a rebuilt
    report) keeps the original run's command, commit and loads."""
    sections, tables, complete = [], {}, True
    for scenario in scenarios:
        text, tables[scenario], good = scenario_section(args, out, scenario, models, records, choices)
        sections.append(text)
        complete &= good
    meta = {"benchmark": "sync", "command": ["python", "-m", "mpikanel.bench", *sys.argv[1:]],
            "git_commit": git_commit(), "versions": versions(records), "nproc": os.cpu_count(),
            "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
            "harness_wall_s": time.perf_counter() - t_start, "n_runs": len(records),
            "target_rule": (f"{args.target_loss:g} (--target-loss)" if args.target_loss is not None else
                            f"{TARGET_FACTOR} x the lowest final validation loss of the scenario's BSP runs with the "
                            "same seed (the seed also draws the synthetic data: each seed is its own problem)")}
    if meta_override:
        meta.update(meta_override)
    text = _header(args, workload, meta) + "\n" + "\n".join(sections)
    (out / "results.md").write_text(text)
    print(text)
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in records]
    (out / "results.json").write_text(json.dumps({
        **meta, "ranks": args.ranks, "seeds": args.seeds, "lrs": args.lrs, "widen": getattr(args, "widen", 0),
        "step_time": getattr(args, "step_time", None),
        "val_fraction": args.val_fraction, "schedules": getattr(args, "schedules", {}),
        "schedule_runs": getattr(args, "schedule_runs", []),
        "workload": workload, "models": models, "scenarios": {s: run_flags(args, s) for s in scenarios},
        "slowdown": getattr(args, "slowdown", None),
        "tables": tables, "runs": public}, indent=2))
    print(f"results: {out / 'results.md'}, {out / 'results.json'}", file=sys.stderr)
    return 0 if complete else 1
