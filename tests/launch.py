"""Run `python -m mpikanel.train` under mpiexec as a subprocess with a timeout (a hang fails)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mpikanel.comm.environment import RANK_VARIABLES, MpiexecNotFound, child_environment, find_mpiexec, mpiexec_launch
from need import need


def mpiexec() -> str:
    """The launcher next to this Python (the venv's MPI wheel), else the one on PATH."""
    try:
        return find_mpiexec()
    except MpiexecNotFound:
        need("mpiexec", "no mpiexec: install the project with its [test] extra (it brings the default MPI wheel)")


def open_mpi_launcher() -> bool:
    """Whether the launcher is Open MPI's prterun (its mpiexec), which kills the ranks a fraction of a
    second after forwarding SIGTERM and appends a report of its own to a job that exits non-zero."""
    return Path(mpiexec()).with_name("prterun").exists()


def stop_signal() -> signal.Signals:
    """The signal that makes a job checkpoint and exit 75 through this launcher: SIGTERM, or SIGUSR1
    under Open MPI (docs/mpi.md: prterun kills the ranks too soon after forwarding SIGTERM)."""
    return signal.SIGUSR1 if open_mpi_launcher() else signal.SIGTERM


def our_stderr(stderr: str) -> str:
    """What mpikanel printed: `stderr` without what Open MPI's launcher adds of its own (a box of
    dashes naming the rank that exited non-zero; its event library's "[warn] Epoll ..." lines)."""
    text = re.sub(r"^-{20,}\n.*?^-{20,}\n?", "", stderr, flags=re.S | re.M)
    return re.sub(r"^\[warn\] .*\n?", "", text, flags=re.M)


def clean_env(**extra: str) -> dict[str, str]:
    """Environment for child runs: no inherited MPI rank variables nor the user's MPICH settings, the
    project's MPI defaults (one thread per rank, idle ranks sleep) and its launcher defaults (Open MPI
    may oversubscribe and run as root), so mpiexec works as root and on 2 cores."""
    return child_environment(extra=extra, drop=(*RANK_VARIABLES, "MPIR_CVAR"))


def run_train(n: int, *args: str, tmp_path: Path | None = None, timeout: float = 240,
              env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Launch n ranks; returns the process and the summary JSON (None if not written)."""
    summary = None
    program = ["python", "-m", "mpikanel.train", "--quiet", *args]
    if tmp_path is not None:
        summary = tmp_path / f"summary-{os.getpid()}-{len(list(tmp_path.iterdir()))}.json"
        program += ["--summary-json", str(summary)]
    cmd, env = mpiexec_launch(program, ["-n", str(n)], mpiexec=mpiexec(), env=env or clean_env())
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"deadlock or hang: {' '.join(cmd)} did not finish in {timeout}s\n{exc.stderr}")
    data = json.loads(summary.read_text()) if summary is not None and summary.exists() else None
    return proc, data


def checkpoints(directory: Path) -> list[Path]:
    """The complete checkpoints (``ckpt-NNNNNN/`` with a manifest) in a --checkpoint-dir, oldest first."""
    return sorted(p.parent for p in Path(directory).glob("ckpt-*/manifest.json"))


#: `--pause-prob 1` sleeps PACE_S in every worker step: a run then trains for at least its steps per
#: worker times PACE_S, whatever the CPU's speed, its load or the sync model
PACE_S = 0.01
PACE = ["--pause-prob", "1", "--pause-s", str(PACE_S)]
#: a resume keeps the checkpointed run's settings, pacing included: this turns it off
UNPACED = ["--pause-prob", "0"]


def paced_training_left_s(directory: Path, samples: int, workers: int, batch_size: int = 64) -> float:
    """A lower bound, as of now, on how much longer a PACE'd run of `samples` samples (its whole
    budget) trains, from the newest checkpoint in its --checkpoint-dir: the server's training time
    at that checkpoint plus the time since it was committed is the most training time so far, and
    `workers` workers together take at most `workers` steps per PACE_S."""
    manifest = json.loads((checkpoints(directory)[-1] / "manifest.json").read_text())
    trained_s = float(manifest["elapsed_s"]) + time.time() - float(manifest["created"])
    return samples / (batch_size * workers) * PACE_S - trained_s
