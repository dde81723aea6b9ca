"""Every model trains under every sync model through the library API (pytest-mpi, in-process).

Run: mpiexec -n 2 python -m pytest --with-mpi tests/mpi   (and -n 4)
"""
import pytest

from mpikanel.kernels import BUILTIN
from mpikanel.sync import SYNC_MODELS
from mpikanel.train import train

pytestmark = pytest.mark.mpi(min_size=2)

TINY = {"synthetic_rows": 3000, "synthetic_features": 20, "epochs": 2, "quiet": True, "hidden": 16}


@pytest.mark.parametrize("sync", SYNC_MODELS)
@pytest.mark.parametrize("model", BUILTIN)
def test_model_trains_under_sync(model, sync):
    from mpi4py import MPI
    lr = {"lsq": 0.02, "mlp": 0.2}.get(model, 0.1)
    s = train({**TINY, "model": model, "sync": sync, "lr": lr}, comm=MPI.COMM_WORLD)
    chance = 0.5 if model == "logistic" else 0.1
    assert s["test_accuracy"] > chance + 0.2, s["test_accuracy"]
    assert s["deltas_sent"] == s["deltas_applied"] and s["delta_sum_rel_error"] < 1e-9
