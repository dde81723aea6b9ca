"""Test set-up: make tests/ importable, end a whole MPI test run when one rank fails, turn the
needs_fashion mark into need_fashion_mnist, and print a stage's counts in one line."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from need import need_fashion_mnist  # noqa: E402  (tests/ importable first)


def pytest_runtest_setup(item):
    """Tests marked needs_fashion skip (or, under CI as root, fail) without the dataset."""
    if item.get_closest_marker("needs_fashion"):
        need_fashion_mnist()


def pytest_unconfigure(config):
    """With MPIKANEL_TEST_STAGE set (scripts/test.sh), the stage's counts in one line, after pytest's own
    summary; under mpiexec only rank 0's (the launcher's rank variable: MPI may be finalized by now)."""
    stage = os.environ.get("MPIKANEL_TEST_STAGE")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMIX_RANK")
    if not stage or reporter is None or int(rank or 0) != 0:
        return
    n = {key: len(reporter.stats.get(key, ())) for key in ("passed", "failed", "skipped", "error")}
    reporter.write_line(f"{stage}: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped, "
                        f"{n['error']} errors")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    """Under mpiexec, a failure on one rank would leave the others blocked: abort them all."""
    if not report.failed or "mpi4py.MPI" not in sys.modules:
        return
    from mpi4py import MPI
    if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
        rank = MPI.COMM_WORLD.Get_rank()
        sys.stderr.write(f"\n[rank {rank}] {report.longreprtext}\n[rank {rank}] test {report.nodeid} failed: "
                         "aborting all ranks\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
