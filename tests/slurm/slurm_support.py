"""Helpers for the SLURM job-script tests: the cluster handle and bounded polling."""
from __future__ import annotations

import re
import subprocess
import sys
import time
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
JOBS = ROOT / "jobs" / "slurm"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED"}


#: how long a client command is retried while slurmctld does not answer
CONTROLLER_RETRY_S = 60.0
#: what the client commands print when slurmctld did not answer in time (transient, not a job error)
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|"
                          r"Slurm backup controller in standby|Zero Bytes were transmitted")


def controller_unreachable(stderr: str) -> bool:
    """True when a SLURM client failed only because the controller did not answer."""
    return bool(_UNREACHABLE.search(stderr or ""))


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", f"timed out after {timeout}s")


@dataclass
class Slurm:
    """The running test cluster and helpers to use it, every call bounded by a timeout."""

    dir: Path
    env: dict[str, str] = field(default_factory=dict)

    def job_env(self, **extra: str) -> dict[str, str]:
        """Environment for sbatch (exported into the job): the project's Python, a warm numba cache."""
        env = dict(self.env)
        env.update(MPIKANEL_PYTHON=sys.executable,
                   MPIKANEL_MPIEXEC=str(Path(sys.executable).parent / "mpiexec"),
                   NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(ROOT / ".numba-cache")),
                   # the test nodes share the machine's 2 cores, and a job step may hold fewer cores than
                   # its ranks: Open MPI's mpiexec then refuses its default binding to cores (exit 213);
                   # on a real cluster a node holds a core per task. Intel MPI ignores this.
                   PRTE_MCA_hwloc_default_binding_policy="none")
        env.update(extra)
        return env

    def cmd(self, *args: str, timeout: float = 20, check: bool = True,
            retry_s: float = CONTROLLER_RETRY_S) -> subprocess.CompletedProcess:
        """Run a SLURM client command; retried while the controller does not answer (a busy
        slurmctld on a loaded 2-core machine drops a request now and then), up to retry_s."""
        deadline = time.monotonic() + retry_s
        while True:
            proc = _run(list(args), self.env, timeout)
            if not (proc.returncode != 0 and controller_unreachable(proc.stderr)
                    and time.monotonic() < deadline):
                break
            sys.stderr.write(f"[slurm] controller did not answer {args[0]}; retrying\n")
            time.sleep(1.0)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(args)} -> rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict ({} once SLURM forgot the job: MinJobAge=4 s here)."""
        proc = self.cmd("scontrol", "-o", "show", "job", job_id, check=False)
        if proc.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout.splitlines()[0] if proc.stdout else ""))

    def wait_for(self, what: str, predicate, timeout: float, interval: float = 0.5):
        """Poll predicate() until it returns something truthy; fail after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def cancel(self, job_id: str) -> None:
        self.cmd("scancel", job_id, check=False)

    def job_processes_gone(self, job_id: str) -> bool:
        """True once no slurmstepd of this job is left on this (the only) node: a requeued job
        started while the previous run's step daemon still exits collides with it (srun's PMI2
        then fails: 'failed to send temp kvs to compute nodes')."""
        tag = f"[{job_id}.".encode()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if cmdline.startswith(b"slurmstepd") and tag in cmdline:
                    return False
        return True
