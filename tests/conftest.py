"""Test set-up: make tests/ importable and end a whole MPI test run when one rank fails."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


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
