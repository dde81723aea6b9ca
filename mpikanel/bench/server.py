"""``bench server``: updates/s of mpikanel's parameter server (ASP, BSP) against a plain mpi4py loop."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

from .launch import HEAVY_YIELD, RankRunError, find_mpiexec, have_mpiexec, rank_env, run_ranks

RANK_MODULE = "mpikanel.bench._server_ranks"
DEFAULT_MODES = ("asp", "bsp", "plain")
VARIANT_MODES = ("asp-testsome", "asp-waitany")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the server benchmark."""
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 16], help="MPI world sizes (server + workers)")
    parser.add_argument("--params", type=int, default=10000, help="float64 parameters per message")
    parser.add_argument("--pushes", type=int, default=500, help="pushes per worker per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per case (median reported)")
    parser.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES),
                        choices=DEFAULT_MODES + VARIANT_MODES + ("bsp-testsome", "bsp-waitany"),
                        help="cases to run; asp-/bsp-<variant> are bench-only receive loops")
    env = parser.add_mutually_exclusive_group()
    env.add_argument("--env-default", dest="no_heavy_yield", action="store_false",
                     help=f"project default environment: {HEAVY_YIELD} unset so mpikanel.comm sets it (default)")
    env.add_argument("--no-heavy-yield", dest="no_heavy_yield", action="store_true",
                     help=f"also run the mpikanel ASP case with {HEAVY_YIELD}=0 to show its effect")
    parser.set_defaults(no_heavy_yield=False)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per launched case")
    parser.add_argument("--json", metavar="PATH", help="write results, versions and machine to PATH")
    parser.add_argument("--out", metavar="DIR",
                        help="write a result set: DIR/server.json (as --json), DIR/server.md and DIR/provenance.json")


def cases(args: argparse.Namespace) -> list[tuple[int, str, bool | None]]:
    """(ranks, mode, heavy_yield) for each launch; None keeps the project default."""
    out = [(r, m, None) for r in args.ranks for m in args.modes]
    if args.no_heavy_yield:
        out += [(r, "asp", False) for r in args.ranks]
    return out


def _label(mode: str, heavy_yield: bool | None) -> str:
    return mode if heavy_yield is None else f"{mode} ({HEAVY_YIELD}={int(heavy_yield)})"


def format_table(results: list[dict]) -> str:
    """Ranks, mode, updates/s, ratio to the plain loop at the same size, heavy-yield in effect."""
    plain = {r["ranks"]: r["updates_per_s"] for r in results if r["mode"] == "plain" and r["case_heavy_yield"] is None}
    rows = [("ranks", "mode", "updates/s", "min-max", "vs plain", "heavy-yield")]
    for r in results:
        base = plain.get(r["ranks"])
        rates = r["updates_per_s_all"]
        rows.append((str(r["ranks"]), r["label"], f"{r['updates_per_s']:.0f}", f"{min(rates):.0f}-{max(rates):.0f}",
                     f"{r['updates_per_s'] / base:.2f}" if base and r["mode"] != "plain" else "-",
                     r["heavy_yield"] or "unset"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i in (0, 2, 3, 4) else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows)


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def report(args: argparse.Namespace, results: list[dict]) -> dict:
    """The --json document: settings, versions, machine, command line and every result."""
    versions = dict(results[0]["versions"]) if results else {}
    versions.update(python=platform.python_version(), mpich_wheel=_dist_version("mpich"))
    return {"benchmark": "server", "command": [sys.executable, "-m", "mpikanel.bench", *sys.argv[1:]],
            "settings": {k: getattr(args, k) for k in ("ranks", "params", "pushes", "repeats", "modes", "no_heavy_yield")},
            "versions": versions, "mpiexec": find_mpiexec(),
            "machine": {"nproc": os.cpu_count(), "platform": platform.platform(), "processor": platform.machine()},
            "results": results}


def results_dir(args: argparse.Namespace) -> str | None:
    """--out: the result set this run writes, if any."""
    return args.out


def run(args: argparse.Namespace) -> int:
    """Launch every case, print the table, optionally write JSON; 1 if any case failed."""
    if not have_mpiexec():
        return 2
    results, failed = [], 0
    for ranks, mode, heavy_yield in cases(args):
        flags = [mode, "--params", str(args.params), "--pushes", str(args.pushes), "--repeats", str(args.repeats)]
        try:
            res = run_ranks(ranks, RANK_MODULE, flags, rank_env(heavy_yield), args.timeout).results[0]
        except RankRunError as exc:
            print(f"mpikanel bench: {_label(mode, heavy_yield)} at {ranks} ranks failed: {exc}", file=sys.stderr)
            failed += 1
            continue
        res.update(label=_label(mode, heavy_yield), case_heavy_yield=heavy_yield)
        results.append(res)
        print(f"  {ranks:>3} ranks {res['label']:<14} {res['updates_per_s']:>9.0f} updates/s", file=sys.stderr, flush=True)
    print(f"params={args.params} float64, pushes/worker={args.pushes}, repeats={args.repeats} (median), "
          f"nproc={os.cpu_count()}")
    table = format_table(results)
    print(table)
    doc = report(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "server.json").write_text(json.dumps(doc, indent=2))
        (out / "server.md").write_text(f"`python -m mpikanel.bench {' '.join(sys.argv[1:])}`\n\n```\n{table}\n```\n")
    return 1 if failed or not all(r["check_ok"] for r in results) else 0
