"""Sparse against dense push frames at the default --l2 on a power-law CSR problem (lazy L2 decay).

4 workers + 1 server, BSP, logistic on synthetic-sparse (200k features, 50 power-law draws a
row, 40k rows, the default 3 epochs of the shared budget), seeds 0 1 2, frames --push sparse and
--push dense in turn; with --eager-rev REV the same two runs (seed 0) on the code of git revision
REV too (before lazy decay: every step decays every weight). Writes results.json and results.md
next to this file (or to --out). From the repository root:

    NUMBA_CACHE_DIR=$PWD/.numba-cache .venv/bin/python docs/results/lazy-l2/bench_lazy_l2.py --eager-rev REV
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
PROBLEM = ["--sync", "bsp", "--data", "synthetic-sparse", "--synthetic-features", "200000", "--synthetic-rows", "40000",
           "--model", "logistic", "--lr", "0.25"]          # --l2: the default (1e-4)
RANKS = 5


def train(push: str, seed: int, out: Path, src: Path | None = None) -> dict:
    """One run (src: another checkout's mpikanel, imported ahead of this one); its summary."""
    summary = out / f"{'eager' if src else 'lazy'}-{push}-{seed}.json"
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "mpiexec"), "-n", str(RANKS), sys.executable, "-m", "mpikanel.train", "--quiet", *PROBLEM,
           "--seed", str(seed), "--push", push, "--summary-json", str(summary)]
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba-cache"))
    if src is not None:
        env.update(PYTHONPATH=str(src), NUMBA_CACHE_DIR=str(src / ".numba-cache"))
    subprocess.run(cmd, check=True, timeout=300, env=env, cwd=src or ROOT, stdout=subprocess.DEVNULL)
    s = json.loads(summary.read_text())
    return {"code": "eager" if src else "lazy", "push": push, "seed": seed, "bytes_per_push": s["bytes_per_push"],
            "pushes": s["deltas_sent"], "wall_s": s["wall_s"], "test_loss": s["test_loss"],
            "test_accuracy": s["test_accuracy"], "params_sha256": s["params_sha256"],
            "load_avg_before": s["load_avg_before"], "load_avg_after": s["load_avg_after"]}


def checkout(rev: str, where: Path) -> Path:
    """The package of git revision rev, extracted under where."""
    archive = subprocess.run(["git", "archive", rev, "mpikanel"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def table(rows: list[dict]) -> dict:
    """Medians per (code, push) and the sparse/dense ratios."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["code"], r["push"]), []).append(r)
    med = {f"{c}-{p}": {k: statistics.median(r[k] for r in g) for k in ("bytes_per_push", "wall_s", "test_loss")}
           | {"runs": len(g)} for (c, p), g in groups.items()}
    out = {"medians": med}
    for code in ("lazy", "eager"):
        if f"{code}-sparse" in med and f"{code}-dense" in med:
            sp, de = med[f"{code}-sparse"], med[f"{code}-dense"]
            out[f"{code}_ratios"] = {"bytes_dense_over_sparse": de["bytes_per_push"] / sp["bytes_per_push"],
                                     "time_dense_over_sparse": de["wall_s"] / sp["wall_s"],
                                     "loss_rel_diff": abs(sp["test_loss"] - de["test_loss"]) / de["test_loss"]}
    eager = [r for r in rows if r["code"] == "eager"]
    same = [(r, e) for e in eager for r in rows
            if r["code"] == "lazy" and (r["push"], r["seed"]) == (e["push"], e["seed"])]
    if same:
        out["lazy_vs_eager_loss_rel_diff"] = max(abs(r["test_loss"] - e["test_loss"]) / e["test_loss"] for r, e in same)
    return out


def markdown(report: dict) -> str:
    """The results table."""
    lines = ["# Sparse against dense push frames at the default L2 (1e-4)", "",
             "4 workers + 1 server, BSP, logistic on `synthetic-sparse` (200k features, 50 power-law draws a "
             "row, duplicates dropped, 40k rows, 3 epochs of the shared budget, lr 0.25); medians over the seeds "
             "run (eager: seed 0 only, the code before lazy decay). Goals: sparse frames >= 20x fewer bytes "
             "and >= 1.7x faster than dense, final loss within 0.5%.", "",
             f"`{report['command']}`", "",
             f"commit {report['commit']}, {report['nproc']} cores, load average before/after: "
             f"{report['uptime_before']} / {report['uptime_after']}", "",
             "| code | push | runs | bytes per push | wall s | test loss |", "|---|---|---|---|---|---|"]
    for key, m in report["summary"]["medians"].items():
        code, push = key.split("-")
        lines.append(f"| {code} L2 | `--push {push}` | {m['runs']} | {m['bytes_per_push']:,.0f} | {m['wall_s']:.2f} "
                     f"| {m['test_loss']:.4f} |")
    lines.append("")
    for code in ("lazy", "eager"):
        r = report["summary"].get(f"{code}_ratios")
        if r:
            lines.append(f"- {code}: sparse frames carry {r['bytes_dense_over_sparse']:.1f}x fewer bytes than dense, "
                         f"dense/sparse wall {r['time_dense_over_sparse']:.2f}x, final loss differs by "
                         f"{100 * r['loss_rel_diff']:.4f}%")
    if "lazy_vs_eager_loss_rel_diff" in report["summary"]:
        lines.append(f"- lazy against eager decay, same seed and frames: final loss differs by at most "
                     f"{100 * report['summary']['lazy_vs_eager_loss_rel_diff']:.4f}%")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eager-rev", help="also run seed 0 on this git revision (code before lazy decay)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--report", action="store_true", help="only rewrite results.md (and the summary) from results.json")
    args = ap.parse_args()
    if args.report:
        report = json.loads((args.out / "results.json").read_text())
        report["summary"] = table(report["rows"])
        (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "results.md").write_text(markdown(report))
        print(markdown(report))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    uptime_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for seed in args.seeds:
            for push in ("sparse", "dense"):
                rows.append(train(push, seed, work))
                print(json.dumps(rows[-1]), flush=True)
        if args.eager_rev:
            src = checkout(args.eager_rev, work)
            for push in ("sparse", "dense"):
                rows.append(train(push, args.seeds[0], work, src))
                print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "mpikanel"], cwd=ROOT, capture_output=True,
                           text=True).stdout
    report = {"command": "python docs/results/lazy-l2/bench_lazy_l2.py " + " ".join(sys.argv[1:]),
              "train_args": ["mpiexec", "-n", str(RANKS), "python", "-m", "mpikanel.train", *PROBLEM, "--push", "P",
                             "--seed", "S"],
              "commit": commit + (" (+ uncommitted changes)" if dirty else ""), "nproc": os.cpu_count(),
              "uptime_before": [round(x, 2) for x in uptime_before],
              "uptime_after": [round(x, 2) for x in os.getloadavg()], "rows": rows, "summary": table(rows)}
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
