"""Process environment that must be set before mpi4py initializes MPI."""
from __future__ import annotations

import os
import sys
import warnings

#: Defaults applied with setdefault, so a user's own setting always wins.
MPI_ENV_DEFAULTS = {
    # Waiting ranks sleep instead of spinning: 2.3-2.5x faster 16-rank oversubscribed runs
    # with the MPICH wheel (shared/notes/measurements.md).
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
    # One compute thread per rank: ranks, not threads, use the cores.
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def prepare_environment() -> dict[str, str]:
    """Apply MPI_ENV_DEFAULTS unless set; returns what is in effect.

    Only effective before ``mpi4py.MPI`` is first imported; if it already was, the
    heavy-yield default cannot apply and a warning says so once.
    """
    mpi_loaded = "mpi4py.MPI" in sys.modules
    for key, value in MPI_ENV_DEFAULTS.items():
        if key.startswith("MPIR_CVAR") and mpi_loaded:
            if key not in os.environ:
                warnings.warn(f"mpi4py.MPI was imported before mpikanel: {key}={value} cannot take "
                              "effect; set it in the environment or import mpikanel first "
                              "(idle ranks will spin on oversubscribed nodes)", RuntimeWarning, stacklevel=3)
            continue
        os.environ.setdefault(key, value)
    return {k: os.environ.get(k, "") for k in MPI_ENV_DEFAULTS}


def env_rank() -> int:
    """This process's rank as the launcher announces it, before MPI starts (0 if unknown)."""
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        value = os.environ.get(key)
        if value is not None and value.isdigit():
            return int(value)
    return 0
