"""``bench scale``: what K server ranks change: pushes/s, bytes and CPU per push per server,
server peak memory and the held time to a target loss, from real ``mpikanel.train`` runs."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..comm.environment import mpiexec_launch
from ..engine.sparse import PUSH_MODES
from .launch import have_mpiexec, rank_env, write_results
from .launch import results_dir  # noqa: F401  - re-exported: this bench writes a result set

#: name -> (train flags, what it is); --push applies to the sparse one (a dense model keeps dense frames)
WORKLOADS: dict[str, tuple[list[str], str]] = {
    "sparse-1m": (["--model", "logistic", "--data", "synthetic-sparse", "--synthetic-features", "1000000",
                   "--sparse-nnz", "50", "--synthetic-rows", "20000", "--batch-size", "64", "--lr", "0.25",
                   "--l2", "0"],
                  "logistic, synthetic-sparse 1M features (~50 nnz/row): 1M parameters"),
    "sparse-10m": (["--model", "logistic", "--data", "synthetic-sparse", "--synthetic-features", "10000000",
                    "--sparse-nnz", "50", "--synthetic-rows", "20000", "--batch-size", "64", "--lr", "0.25",
                    "--l2", "0"],
                   "logistic, synthetic-sparse 10M features (~50 nnz/row): 10M parameters"),
    "dense-10k": (["--model", "softmax", "--data", "synthetic", "--synthetic-features", "1000",
                   "--synthetic-rows", "20000", "--batch-size", "64", "--lr", "0.4"],
                  "softmax, dense synthetic 1000 features x 10 classes: 10k parameters"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the scale benchmark."""
    parser.add_argument("--workloads", nargs="+", default=["sparse-1m", "dense-10k"], choices=list(WORKLOADS))
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4], help="server ranks K")
    parser.add_argument("--workers", type=int, default=4, help="worker ranks")
    parser.add_argument("--push", nargs="+", default=["dense", "auto"], choices=PUSH_MODES,
                        help="push/pull frames compared on sparse workloads (the first sets the target)")
    parser.add_argument("--sync", nargs="+", default=["asp", "bsp"], help="sync models")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate instead of the workload's (a BSP round sums every worker's delta: "
                             "more workers take a smaller rate)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--target-loss", type=float, nargs="+", default=None,
                        help="target test loss per workload (default: 1.05 x the K=1 BSP final loss of seed 0)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per run")
    parser.add_argument("--out", metavar="DIR", help="write results.json and results.md here")


def run_summary(flags: list[str], timeout: float) -> dict:
    """Run `mpiexec FLAGS[:2] python -m mpikanel.train FLAGS[2:]` quietly; its summary JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "summary.json"
        cmd, env = mpiexec_launch(["python", "-m", "mpikanel.train", "--quiet", "--progress", "off", *flags[2:],
                                   "--summary-json", str(path)], flags[:2], env=rank_env(None))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0 or not path.exists():
            raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        return json.loads(path.read_text())


def row(workload: str, k: int, sync: str, seed: int, s: dict) -> dict:
    """The figures of one run."""
    servers = s["server_ranks"]
    pushes = max(1, s["deltas_sent"])
    return {"workload": workload, "servers": k, "sync": sync, "push": s["push"], "seed": seed, "workers": s["workers"],
            "bytes_per_push": s["bytes_per_push"], "bytes_per_reply": s["bytes_received"] / pushes,
            "n_params": s["n_params"], "wall_s": s["wall_s"], "pushes": s["deltas_sent"],
            "pushes_per_s": s["pushes_per_s"],
            "bytes_per_push_per_server": [r["bytes_received"] / pushes for r in servers],
            "busy_us_per_push": [r["busy_us_per_push"] for r in servers],
            "peak_rss_mb": [r["peak_rss_mb"] for r in servers],
            "test_loss": s["test_loss"], "test_accuracy": s["test_accuracy"],
            "time_to_target_s": s["time_to_target_s"], "target_loss": s["target_loss"],
            "lost": s["delta_sum_rel_error"], "load_avg_after": s["load_avg_after"]}


def _mid(values: list[float]) -> float:
    return statistics.median(values)


def format_table(rows: list[dict]) -> str:
    """One line per workload, sync model and K: medians over seeds."""
    out = ["| workload | sync | push | K | pushes/s | kB/push | kB/reply | MB/push per server | "
           "busy µs/push per server (max) | server peak RSS MiB (max) | held time to target s | final test loss |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["workload"], r["sync"], r["push"], r["servers"]) for r in rows})
    for wl, sync, push, k in keys:
        rs = [r for r in rows if (r["workload"], r["sync"], r["push"], r["servers"]) == (wl, sync, push, k)]
        held = [r["time_to_target_s"] for r in rs]
        held_txt = f"{_mid(held):.2f}" if all(h is not None for h in held) else \
            f"not held in {sum(h is None for h in held)}/{len(held)}"
        out.append(f"| {wl} | {sync} | {push} | {k} | {_mid([r['pushes_per_s'] for r in rs]):.0f} | "
                   f"{_mid([r['bytes_per_push'] for r in rs]) / 1e3:.1f} | "
                   f"{_mid([r['bytes_per_reply'] for r in rs]) / 1e3:.1f} | "
                   f"{_mid([max(r['bytes_per_push_per_server']) for r in rs]) / 2**20:.2f} | "
                   f"{_mid([max(r['busy_us_per_push']) for r in rs]):.0f} | "
                   f"{_mid([max(r['peak_rss_mb']) for r in rs]):.0f} | {held_txt} | "
                   f"{_mid([r['test_loss'] for r in rs]):.4f} |")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Run every case, print the table, write results; 1 if any run failed."""
    if not have_mpiexec():
        return 2
    rows, failed = [], 0
    for i, wl in enumerate(args.workloads):
        flags, _ = WORKLOADS[wl]
        target = args.target_loss[i] if args.target_loss else None
        order = sorted(args.servers, key=lambda k: (k != 1, k))      # K = 1 first: it sets the target
        pushes = args.push if "synthetic-sparse" in flags else ["dense"]
        cases = [(sync, push, k) for sync in sorted(args.sync, key=lambda m: m != "bsp")
                 for push in pushes for k in order]
        for sync, push, k in cases:
            for seed in args.seeds:
                cmd = ["-n", str(k + args.workers), "--servers", str(k), "--sync", sync, "--seed", str(seed),
                       "--push", push, "--epochs", str(args.epochs), *flags]
                if args.lr is not None:
                    cmd += ["--lr", str(args.lr)]       # the last --lr wins
                if target is not None:
                    cmd += ["--target-loss", str(target)]
                try:
                    s = run_summary(cmd, args.timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    print(f"mpikanel bench: {wl} {sync} {push} K={k} seed {seed} failed: {exc}", file=sys.stderr)
                    failed += 1
                    continue
                if target is None:          # the first case (BSP, K = 1, the first push mode)
                    target = round(1.05 * s["test_loss"], 4)
                    s = run_summary(cmd + ["--target-loss", str(target)], args.timeout)
                rows.append(row(wl, k, sync, seed, s))
                r = rows[-1]
                print(f"  {wl} {sync} {push} K={k} seed {seed}: {r['pushes_per_s']:.0f} pushes/s, "
                      f"busy {max(r['busy_us_per_push']):.0f} us/push, loss {r['test_loss']:.4f}",
                      file=sys.stderr, flush=True)
    table = format_table(rows)
    print(table)
    if args.out:
        write_results(args.out, table, workloads={w: WORKLOADS[w][1] for w in args.workloads}, rows=rows)
    return 1 if failed else 0
