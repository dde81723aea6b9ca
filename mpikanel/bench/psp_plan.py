"""``bench psp-plan``: PSP's planning cost per round and per push at 100 to 10,000 workers.

Pure computation, no MPI: a PSP policy is fed seeded step times (lognormal spread, one 4x
straggler) and arrival offsets, then timed on what the server does per push (``observe`` of the
step time and of the round's arrival) and once per round (predict step times and offsets, run the
sweep, pick the critical worker: the work of ``PSP._replan``). Writes ``DIR/psp-plan.md``/``.json``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ..sync.psp import PSP
from .provenance import default_out
from .sync import markdown_table

GOAL_S = 0.050          # the goal: under 50 ms per round at 10,000 workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the planning-time bench."""
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per size (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="output directory (default runs/psp-plan-TIME)")


def measure(n: int, k_max: int, rounds: int, seed: int) -> dict[str, float]:
    """Median seconds per round of planning and per push of bookkeeping for n workers."""
    rng = np.random.default_rng(seed)
    base = 0.01 * np.exp(rng.normal(0.0, 0.5, n))
    base[0] *= 4.0
    psp = PSP(n, k_max=k_max, min_gain=0.0)
    p = psp.predictor
    plan_s, push_s = [], []
    for r in range(rounds + 2):
        steps = base * rng.uniform(0.9, 1.1, n)
        arrivals = steps * rng.integers(1, k_max + 1, n) + rng.uniform(0, 0.002, n)
        t0 = time.perf_counter()
        for w in range(n):
            p.observe(w, float(steps[w]))
            p.observe_round(w, float(arrivals[w]), 1)
        t1 = time.perf_counter()
        t, c = p.predict(), p.offsets()
        plan, _ = psp.choose(t, c)
        predicted = c + plan.k * t
        int(np.lexsort((t, predicted))[-1])
        t2 = time.perf_counter()
        if r >= 2:                          # the first rounds fill the windows
            push_s.append((t1 - t0) / n)
            plan_s.append(t2 - t1)
    return {"workers": n, "plan_ms": 1e3 * float(np.median(plan_s)), "plan_p90_ms": 1e3 * float(np.percentile(plan_s, 90)),
            "push_us": 1e6 * float(np.median(push_s)), "k_mean": float(plan.k.mean())}


def results_dir(args: argparse.Namespace) -> str:
    """--out, or runs/psp-plan-TIME."""
    return args.out or default_out("psp-plan")


def format_table(rows: list[dict]) -> str:
    """One line per worker count."""
    header = ["workers", "plan per round (ms, median)", "p90 (ms)", "per push (µs)", "mean k"]
    return markdown_table(header, [[str(r["workers"]), f"{r['plan_ms']:.2f}", f"{r['plan_p90_ms']:.2f}",
                                    f"{r['push_us']:.1f}", f"{r['k_mean']:.2f}"] for r in rows])


def run(args: argparse.Namespace) -> int:
    """Time planning at each worker count; print and write the table."""
    out = Path(results_dir(args))
    out.mkdir(parents=True, exist_ok=True)
    rows = [measure(n, args.k_max, args.rounds, args.seed) for n in args.workers]
    table = format_table(rows)
    biggest = rows[-1]
    verdict = (f"goal (< {GOAL_S * 1e3:.0f} ms per round at {biggest['workers']} workers): "
               f"{'met' if biggest['plan_ms'] < GOAL_S * 1e3 else 'MISSED'} ({biggest['plan_ms']:.2f} ms)")
    text = f"# PSP planning cost (k_max {args.k_max})\n\n{table}\n\n{verdict}\n"
    (out / "psp-plan.md").write_text(text)
    (out / "psp-plan.json").write_text(json.dumps({"k_max": args.k_max, "rows": rows}, indent=2))
    print(text)
    return 0
