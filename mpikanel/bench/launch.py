"""Run a rank-side benchmark module under mpiexec (``mpikanel.comm.environment.mpiexec_launch``), with a timeout."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..comm.environment import (IDLE_SPIN, MPI_ENV_DEFAULTS, MpiexecNotFound, child_environment, find_mpiexec,
                                mpiexec_launch)

HEAVY_YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


class RankRunError(RuntimeError):
    """A launched benchmark failed, timed out, or printed no JSON result."""


def have_mpiexec() -> bool:
    """True if find_mpiexec finds one; otherwise the reason goes to stderr (a bench then exits 2)."""
    try:
        find_mpiexec()
    except MpiexecNotFound as exc:
        print(f"mpikanel bench: error: {exc}", file=sys.stderr)
        return False
    return True


def rank_env(heavy_yield: bool | None) -> dict[str, str]:
    """Child environment: inherited rank variables dropped, the launcher defaults of
    mpikanel.comm.environment (Open MPI: oversubscribe, root) set unless set; the idle-rank
    settings of every MPI family (MPICH heavy-yield and its Open MPI / Intel MPI equivalents)
    forced on/off, or removed (None: the ranks' own mpikanel.comm import applies the defaults)."""
    forced = {} if heavy_yield is None else {k: MPI_ENV_DEFAULTS[k] for k in IDLE_SPIN} if heavy_yield else IDLE_SPIN
    env = child_environment({k: v for k, v in os.environ.items() if k not in IDLE_SPIN}, extra=forced)
    if heavy_yield is None:
        for key in IDLE_SPIN:
            env.pop(key, None)
    return with_checkout(env)


def with_checkout(env: dict[str, str], root: str = _REPO_ROOT) -> dict[str, str]:
    """env with this checkout first on PYTHONPATH, so the launched ranks run this code."""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class RankRun:
    """One launch: the command, rank 0's JSON lines and the captured streams."""

    cmd: list[str]
    results: list[dict]
    stdout: str
    stderr: str


def run_ranks(n: int, module: str, args: list[str], env: dict[str, str], timeout: float) -> RankRun:
    """Run ``mpiexec -n n python -m module args``; kill its whole process group on timeout."""
    cmd, env = mpiexec_launch(["python", "-m", module, *args], ["-n", str(n)], env=env)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise RankRunError(f"timed out after {timeout:g}s: {' '.join(cmd)}\n{err[-2000:]}") from None
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not results:
        raise RankRunError(f"exit {proc.returncode}, {len(results)} result lines: {' '.join(cmd)}\n"
                           f"{out[-1000:]}{err[-2000:]}")
    return RankRun(cmd, results, out, err)


def results_dir(args: argparse.Namespace) -> str | None:
    """--out: the result set of a bench that writes one only when asked."""
    return args.out


def write_results(out: str | Path, table: str, **extra: object) -> None:
    """``OUT/results.json`` (the command, the core count and `extra`) and ``OUT/results.md`` (the command and table)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m mpikanel.bench", *sys.argv[1:]])
    (out / "results.json").write_text(json.dumps({"command": command, "nproc": os.cpu_count(), **extra}, indent=2))
    (out / "results.md").write_text(f"`{command}`\n\n{table}\n")
