"""end_rank: an entry point's rank exits with its code and every line it printed, without teardown."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys
from mpikanel.comm.cli import end_rank
atexit.register(lambda: print("interpreter teardown ran", file=sys.stderr))
print("summary line", end="")           # no newline: still in the block-buffered pipe
print("warning line", file=sys.stderr, end="")
end_rank({code})
"""


@pytest.mark.parametrize("code", [0, 2, 75])
def test_end_rank_keeps_the_code_and_the_buffered_output_and_skips_teardown(code):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", PROGRAM.format(code=code)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == code
    assert proc.stdout == "summary line"
    assert proc.stderr == "warning line"       # the atexit handler did not run: no teardown


def test_end_rank_finalizes_mpi_when_it_is_running():
    """With MPI started (a singleton), end_rank finalizes it: MPI_Finalize's own atexit hook would
    otherwise be the last thing to run, and os._exit would skip it."""
    pytest.importorskip("mpi4py")
    program = ("import mpikanel.comm, sys\nfrom mpi4py import MPI\nimport mpikanel.comm.cli as cli\n"
               "real = MPI.Finalize\n"
               "def finalize():\n    real(); print('finalized', flush=True)\n"
               "MPI.Finalize = finalize\n"
               "cli.end_rank(0)\n")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_COMM_WORLD"))})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "finalized\n"
