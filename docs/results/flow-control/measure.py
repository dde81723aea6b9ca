"""Flow control of large pushes (--flow-control) on and off: the server's memory at 64 workers,
and what the ask/go round trip costs a push at 8 workers.

memory: the server-memory job (docs/results/server-memory/measure.sh: 65 ranks, ASP, 1M
        parameters pushed as dense frames, 8 MB) with flow control on and off in turn, ROUNDS
        times, and once with 1,000 features (the MPI's and Python's own per-process memory);
speed:  9 ranks (8 workers), dense frames of a 1M-parameter model, BSP and ASP, seeds 0 1 2,
        on and off interleaved: pushes per second, the server's busy time per push, wall and loss.

Writes results.json, results.md and provenance.json to --out. From the repository root:

    NUMBA_CACHE_DIR=$PWD/.numba-cache .venv/bin/python docs/results/flow-control/measure.py --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from mpikanel.bench import provenance  # noqa: E402

MODEL_MIB = 8e6 / 2**20
MEMORY_JOB = ["--servers", "1", "--sync", "asp", "--model", "logistic", "--data", "synthetic-sparse",
              "--synthetic-rows", "14000", "--epochs", "1", "--lr", "0.25", "--l2", "0", "--snapshot-interval", "1000",
              "--push", "dense"]
SPEED_JOB = ["--servers", "1", "--model", "logistic", "--data", "synthetic-sparse", "--synthetic-features", "1000000",
             "--synthetic-rows", "20000", "--epochs", "1", "--lr", "0.125", "--l2", "0", "--push", "dense"]


def train(ranks: int, args: list[str], summary: Path) -> dict:
    """One run of python -m mpikanel.train on `ranks` ranks; its summary."""
    cmd = [sys.executable, "-m", "mpikanel.run", "-n", str(ranks), "--", "python", "-m", "mpikanel.train", "--quiet",
           *args, "--summary-json", str(summary)]
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba-cache"))
    subprocess.run(cmd, check=True, timeout=900, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())


def server(s: dict) -> dict:
    """Server 0's line of a summary."""
    return s["server_ranks"][0]


def memory(rounds: int, work: Path) -> list[dict]:
    """Server peak RSS of the 65-rank job, flow control on and off in turn, and the 1k-feature baseline."""
    rows = []
    for r in range(rounds):
        for flow in ("on", "off"):
            s = train(65, [*MEMORY_JOB, "--synthetic-features", "1000000", "--flow-control", flow],
                      work / f"mem-{flow}-{r}.json")
            rows.append({"part": "memory", "flow": flow, "round": r, "peak_rss_mb": server(s)["peak_rss_mb"],
                         "push_buffers": server(s)["push_buffers"], "wall_s": s["wall_s"],
                         "load": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
    s = train(65, [*MEMORY_JOB, "--synthetic-features", "1000", "--flow-control", "off"], work / "mem-1k.json")
    rows.append({"part": "baseline", "flow": "off", "peak_rss_mb": server(s)["peak_rss_mb"], "wall_s": s["wall_s"]})
    print(json.dumps(rows[-1]), flush=True)
    return rows


def speed(seeds: list[int], work: Path) -> list[dict]:
    """8 workers, dense 8 MB frames: flow control on and off interleaved, per sync model and seed."""
    rows = []
    for seed in seeds:
        for sync in ("bsp", "asp"):
            for flow in ("on", "off"):
                s = train(9, [*SPEED_JOB, "--sync", sync, "--seed", str(seed), "--flow-control", flow],
                          work / f"speed-{sync}-{flow}-{seed}.json")
                sv = server(s)
                rows.append({"part": "speed", "sync": sync, "flow": flow, "seed": seed, "pushes": sv["pushes"],
                             "wall_s": s["wall_s"], "pushes_per_s": sv["pushes"] / s["wall_s"],
                             "busy_us_per_push": sv["busy_us_per_push"], "peak_rss_mb": sv["peak_rss_mb"],
                             "push_buffers": sv["push_buffers"], "test_loss": s["test_loss"]})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict], prov: dict) -> str:
    """The two tables."""
    base = next(r["peak_rss_mb"] for r in rows if r["part"] == "baseline")
    out = ["# Flow control of large pushes: server memory and cost per push", "",
           f"commit {prov['git_commit']}, {prov['mpi_library']}, load average at the start "
           f"{prov['load_average_start']}", "",
           "## Server memory, 65 ranks (64 workers), ASP, 1M parameters as dense 8 MB frames", "",
           f"Baseline (the same job with 1,000 features): {base:.0f} MiB.", "",
           "| flow control | round | server peak RSS MiB | above baseline / model | push frames | wall s |",
           "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["part"] == "memory"):
        above = (r["peak_rss_mb"] - base) / MODEL_MIB
        out.append(f"| {r['flow']} | {r['round']} | {r['peak_rss_mb']:.0f} | {above:.1f}x "
                   f"| {r['push_buffers']} | {r['wall_s']:.1f} |")
    out += ["", "## Cost per push, 9 ranks (8 workers), 1M parameters as dense frames (medians of the seeds)", "",
            "| sync | flow control | runs | pushes/s | server busy µs per push | wall s | server peak RSS MiB "
            "| push frames | test loss |", "|---|---|---|---|---|---|---|---|---|"]
    for sync in ("bsp", "asp"):
        for flow in ("on", "off"):
            g = [r for r in rows if r["part"] == "speed" and r["sync"] == sync and r["flow"] == flow]
            if g:
                def med(k: str) -> float:
                    return statistics.median(r[k] for r in g)
                out.append(f"| {sync} | {flow} | {len(g)} | {med('pushes_per_s'):.1f} | {med('busy_us_per_push'):,.0f} "
                           f"| {med('wall_s'):.2f} | {med('peak_rss_mb'):.0f} | {med('push_buffers'):.0f} "
                           f"| {med('test_loss'):.4f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2, help="memory runs per setting")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--parts", nargs="+", default=["memory", "speed"], choices=["memory", "speed"])
    ap.add_argument("--allow-dirty", action="store_true")
    args = ap.parse_args()
    prov = provenance.start([], args.out, args.allow_dirty, ROOT)
    prov["command"] = ["python", "docs/results/flow-control/measure.py", *sys.argv[1:]]
    t0 = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "memory" in args.parts:
            rows += memory(args.rounds, Path(tmp))
        if "speed" in args.parts:
            rows += speed(args.seeds, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    provenance.finish(prov, args.out, 0, time.perf_counter() - t0)
    (args.out / "results.md").write_text(markdown(rows, prov))
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
