"""python -m mpikanel.warm: the built-in kernels compiled into numba's cache ahead of a job, and marked so."""
import subprocess
import sys

import pytest

from mpikanel.kernels import _warm_marker, get_model, kernels_cached


def warm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpikanel.warm", *args], capture_output=True, text=True, timeout=600)


def test_warm_marks_what_it_compiled_so_that_a_job_loads_it_on_every_rank_at_once():
    lsq = get_model("lsq")
    if _warm_marker(lsq, True, False) is None:
        pytest.skip("numba does not cache the kernels here")
    for dense, sparse in ((True, False), (False, True)):
        _warm_marker(lsq, dense, sparse).unlink(missing_ok=True)
    proc = warm("lsq", "--jobs", "2")              # dense and CSR in two processes
    assert proc.returncode == 0, proc.stderr
    assert "lsq (dense and CSR) compiled into" in proc.stdout
    assert kernels_cached(lsq, dense=True, sparse=False) and kernels_cached(lsq, dense=False, sparse=True)


@pytest.mark.parametrize("args,needle", [(["nope"], "no built-in model nope"), (["--kind", "all"], "invalid choice"),
                                         (["--jobs", "0"], "--jobs must be at least 1")])
def test_warm_refuses_bad_input_in_one_line(args, needle):
    proc = warm(*args)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
