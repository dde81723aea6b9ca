"""A real single-node SLURM for the job-script tests: started once per session, stopped at the end.

`scripts/slurm-local.sh start DIR` installs Debian's slurm-wlm/munge if missing (root + apt) and
starts munged, slurmctld and slurmd. Every test here is skipped, with the script's reason, where
the script says SLURM cannot run here (its exit code 3: not root and no SLURM, no apt, install
failed) or the platform has no bash; under CI (CI=true) those fail instead (tests/need.py: CI sets
SLURM up). Any other failure of the set-up (exit 1: daemons that do not come up, a broken config, a
timeout) fails the tests everywhere, so a regression in the set-up cannot hide.

Knobs: MPIKANEL_SLURM_DIR (default /tmp/mpikanel-slurm-tests-UID), MPIKANEL_SLURM_PORTS
("CTLD,SLURMD", default "6827,6828" so a cluster you started by hand on 6817/6818 is left alone),
MPIKANEL_SLURM_SKIP=1 to skip these tests outright. `slurm_nodes` is a second cluster of two emulated
nodes (root: network namespaces sth0/sth1 on 198.18.2.0/24, ports 6837/6838), for the jobs that span nodes.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from need import need
from slurm_support import SCRIPT, Slurm, _run

#: scripts/slurm-local.sh's exit code for "SLURM cannot run on this machine" (the only skip)
CANNOT_RUN_HERE = 3


def _skip_reason(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def _cluster(sdir: Path, ports: str, **settings: str):
    """Start (or reuse) a cluster with scripts/slurm-local.sh; yield its handle; stop it if it was not up."""
    if os.environ.get("MPIKANEL_SLURM_SKIP"):
        pytest.skip("MPIKANEL_SLURM_SKIP is set")
    if not sys.platform.startswith("linux") or shutil.which("bash") is None:
        need("SLURM", "the SLURM tests need Linux and bash")
    ctld_port, slurmd_port = ports.split(",")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMI_", "PMIX_", "HYDRA_", "OMPI_"))}
    env.update(SLURM_LOCAL_CTLD_PORT=ctld_port, SLURM_LOCAL_SLURMD_PORT=slurmd_port, **settings)
    t0 = time.monotonic()
    was_up = _run(["bash", str(SCRIPT), "status", str(sdir)], env, 30).returncode == 0
    proc = _run(["bash", str(SCRIPT), "start", str(sdir)], env, 420)
    if proc.returncode == CANNOT_RUN_HERE:
        need("SLURM", f"cannot run a local SLURM here (scripts/slurm-local.sh start: {_skip_reason(proc)})")
    if proc.returncode != 0:
        _run(["bash", str(SCRIPT), "stop", str(sdir)], env, 60)
        pytest.fail(f"scripts/slurm-local.sh start failed with exit code {proc.returncode}:\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    conf = re.search(r"^export SLURM_CONF=(\S+)$", proc.stdout, re.M)
    if not conf:
        pytest.fail(f"scripts/slurm-local.sh start printed no SLURM_CONF: {proc.stdout!r}")
    env["SLURM_CONF"] = conf.group(1)
    sys.stderr.write(f"\n[slurm] cluster in {sdir} up after {time.monotonic() - t0:.1f}s\n")
    try:
        yield Slurm(dir=sdir, env=env)
    finally:
        if not was_up:
            _run(["bash", str(SCRIPT), "stop", str(sdir)], env, 60)


@pytest.fixture(scope="session")
def slurm() -> Slurm:
    """One node: this machine."""
    yield from _cluster(Path(os.environ.get("MPIKANEL_SLURM_DIR", f"/tmp/mpikanel-slurm-tests-{os.getuid()}")),
                        os.environ.get("MPIKANEL_SLURM_PORTS", "6827,6828"))


#: the emulated nodes' namespaces (sth0, sth1) and subnet: apart from a hand-started cluster's
#: (sl, 198.18.1) and scripts/multihost.sh's (mh/mkt, 198.18.0)
NODES_PREFIX, NODES_SUBNET = "st", "198.18.2"


@pytest.fixture(scope="session")
def slurm_nodes() -> Slurm:
    """Two emulated nodes h0 and h1 (network namespaces, one slurmd each): root only."""
    if os.geteuid() != 0:
        need("root", "SLURM across emulated nodes needs root (network namespaces); run the tests as root")
    yield from _cluster(Path(f"/tmp/mpikanel-slurm-nodes-tests-{os.getuid()}"), "6837,6838",
                        SLURM_LOCAL_NODES="2", SLURM_LOCAL_PREFIX=NODES_PREFIX, SLURM_LOCAL_SUBNET=NODES_SUBNET)


@pytest.fixture
def jobdir(tmp_path: Path) -> Path:
    """Where a test's job logs and results go; the job logs are printed when the test fails."""
    return tmp_path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    jobdir = item.funcargs.get("jobdir") if hasattr(item, "funcargs") else None
    if report.failed and jobdir is not None:
        for log in sorted(Path(jobdir).glob("*.out")):
            report.sections.append((f"job log {log.name}", log.read_text(errors="replace")[-6000:]))
