"""Checkpoint write time and training pause against one ``np.save`` of the same bytes, side by side.

Each run trains with periodic checkpoints (every rank writes its part; rank 0 commits the
manifest) and reports, per checkpoint, its bytes, the write time (from the cut's answers to the
manifest's commit), the hold (the cut waiting for every worker's push) and the pause (hold +
write). Right before and after each run the same number of bytes goes through ``np.save`` +
fsync into a new file in the same directory, so the disk's speed at that time (the mean rate
before and after, times the checkpoint's bytes) is what a checkpoint is measured against; and,
the same way, the bytes of the same state written densely (what a naive dump would write).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .launch import have_mpiexec, write_results
from .launch import results_dir  # noqa: F401  - re-exported: this bench writes a result set
from .scale import WORKLOADS, run_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the checkpoint benchmark."""
    parser.add_argument("--workload", default="sparse-10m", choices=list(WORKLOADS))
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--sync", default="bsp")
    parser.add_argument("--every", default="400steps", help="--checkpoint-every of the runs")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--dir", default=None, help="where checkpoints go (default: a temporary directory "
                                                    "under the current one: the disk being measured)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", default=None, help="write results.json and results.md here")


def np_save_s(directory: Path, nbytes: int) -> float:
    """Seconds for one np.save of `nbytes` bytes of float64 plus its fsync, in `directory`."""
    data = np.random.default_rng(0).random(max(1, nbytes // 8))
    path = directory / "npsave.npy"
    t0 = time.perf_counter()
    np.save(path, data)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    took = time.perf_counter() - t0
    path.unlink()
    return took


def _short_run(cmd: list[str], timeout: float) -> dict:
    """The summary of the same run stopped after two steps per worker (its final checkpoint's size)."""
    with tempfile.TemporaryDirectory(dir=Path(cmd[cmd.index("--checkpoint-dir") + 1]).parent) as tmp:
        return run_summary([*cmd, "--max-steps", "2", "--checkpoint-dir", str(Path(tmp) / "ck")], timeout)


def dense_bytes(n_params: int, workers: int) -> int:
    """What the same state takes written densely: every server range's parameters and start, and
    each worker's unsent work and produced sum (the data order aside)."""
    return 8 * n_params * (2 + 2 * workers)


def run(args: argparse.Namespace) -> int:
    """Run each seed, compare every periodic checkpoint with np.save; print the table, write results."""
    if not have_mpiexec():
        return 2
    base = Path(args.dir) if args.dir else Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    flags, _ = WORKLOADS[args.workload]
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(dir=base, prefix="bench-ckpt-") as tmp:
            ck = Path(tmp) / "ck"
            cmd = ["-n", str(args.servers + args.workers), "--servers", str(args.servers), "--sync", args.sync,
                   "--seed", str(seed), "--epochs", str(args.epochs), *flags, "--checkpoint-dir", str(ck),
                   "--checkpoint-every", args.every, "--keep-checkpoints", "2"]
            # the yardstick needs the checkpoint's size: a short run first, the same shape
            short = _short_run(cmd, args.timeout)
            guess = int(short["checkpoints_written"][-1]["bytes"])
            dense = dense_bytes(short["n_params"], args.workers)
            before = np_save_s(Path(tmp), guess) / guess
            dense_before = np_save_s(Path(tmp), dense)
            s = run_summary(cmd, args.timeout)
            written = s["checkpoints_written"]
            nbytes = int(statistics.median(c["bytes"] for c in written))
            after = np_save_s(Path(tmp), nbytes) / nbytes
            dense_after = np_save_s(Path(tmp), dense)
        save_s = nbytes * (before + after) / 2     # at the disk's mean rate before and after the run
        dense_s = (dense_before + dense_after) / 2
        for c in written:
            rows.append({**c, "seed": seed, "np_save_s": save_s, "write_vs_np_save": c["write_s"] / save_s,
                         "dense_bytes": dense, "np_save_dense_s": dense_s, "write_vs_dense": c["write_s"] / dense_s,
                         "pause_vs_write": c["pause_s"] / c["write_s"], "n_params": s["n_params"],
                         "workers": s["workers"], "servers": args.servers, "test_loss": s["test_loss"]})
            print(f"  seed {seed} ckpt {c['seq']} ({c['reason']}): {c['bytes'] / 1e6:.0f} MB in {c['write_s']:.2f} s "
                  f"(np.save {save_s:.2f} s), pause {c['pause_s']:.2f} s", file=sys.stderr, flush=True)
    table = format_table(rows)
    print(table)
    if args.out:
        write_results(args.out, table, rows=rows)
    return 0


def format_table(rows: list[dict]) -> str:
    """One line per checkpoint written."""
    out = ["| seed | ckpt | reason | files | MB | np.save + fsync s | write s | write / np.save | hold s | "
           "pause s | pause / write | server 0 part s | slowest part s | dense MB | np.save dense s | write / dense |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['seed']} | {r['seq']} | {r['reason']} | {r['files']} | {r['bytes'] / 1e6:.0f} | "
                   f"{r['np_save_s']:.2f} | {r['write_s']:.2f} | {r['write_vs_np_save']:.2f} | {r['hold_s']:.2f} | "
                   f"{r['pause_s']:.2f} | {r['pause_vs_write']:.2f} | {r['server0_part_s']:.2f} | "
                   f"{r['slowest_part_s']:.2f} | {r['dense_bytes'] / 1e6:.0f} | {r['np_save_dense_s']:.2f} | "
                   f"{r['write_vs_dense']:.2f} |")
    return "\n".join(out)
