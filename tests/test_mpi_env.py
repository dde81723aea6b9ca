"""Each MPI's settings (mpikanel.comm.environment), the launcher (python -m mpikanel.run), and the
bench/test launch helpers: user settings win, root and oversubscription are handled, and a job
launched through mpikanel.run with none of those settings in the environment runs on any MPI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpikanel import run as mrun
from mpikanel.bench import launch as blaunch
from mpikanel.comm import environment as menv
from need import need

ROOT = Path(__file__).resolve().parents[1]
IDLE_KEYS = ("MPIR_CVAR_ENABLE_HEAVY_YIELD", "OMPI_MCA_mpi_yield_when_idle", "I_MPI_WAIT_MODE")


def test_every_family_has_an_idle_rank_default():
    for key in IDLE_KEYS + ("OMPI_MCA_threads_pthreads_yield_strategy", "I_MPI_THREAD_YIELD"):
        assert key in menv.MPI_ENV_DEFAULTS and key in menv.IDLE_SPIN
        assert menv.MPI_ENV_DEFAULTS[key] != menv.IDLE_SPIN[key]


def test_prepare_environment_sets_defaults_and_user_settings_win(monkeypatch):
    for key in menv.MPI_ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", "0")
    monkeypatch.setenv("I_MPI_WAIT_MODE", "0")
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    effective = menv.prepare_environment()
    assert effective["OMPI_MCA_mpi_yield_when_idle"] == "0" and effective["I_MPI_WAIT_MODE"] == "0"
    assert os.environ["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"
    assert os.environ["OMPI_MCA_threads_pthreads_yield_strategy"] == "nanosleep"
    assert os.environ["I_MPI_THREAD_YIELD"] == "3"


def test_prepare_environment_warns_once_when_mpi_is_already_loaded(monkeypatch):
    for key in menv.MPI_ENV_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", object())
    with pytest.warns(RuntimeWarning, match="OMPI_MCA_mpi_yield_when_idle=1") as record:
        menv.prepare_environment()
    assert len(record) == 1
    assert "I_MPI_WAIT_MODE" not in os.environ and os.environ["OMP_NUM_THREADS"] == "1"


def test_prepare_environment_leaves_numba_threads_alone_once_numba_is_loaded(monkeypatch):
    # numba reads NUMBA_NUM_THREADS at import; a later change breaks its next compile once its
    # thread pool is up, so an in-process simulator run must not set it
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.setitem(sys.modules, "numba", object())
    menv.prepare_environment()
    assert "NUMBA_NUM_THREADS" not in os.environ
    monkeypatch.delitem(sys.modules, "numba")
    menv.prepare_environment()
    assert os.environ["NUMBA_NUM_THREADS"] == "1"


def test_launcher_defaults_allow_root_only_for_root():
    root, user = menv.launcher_defaults(euid=0), menv.launcher_defaults(euid=1000)
    assert root["OMPI_ALLOW_RUN_AS_ROOT"] == root["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in user
    assert user["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"


def test_launcher_environment_keeps_user_settings():
    env = menv.launcher_environment({"PRTE_MCA_rmaps_default_mapping_policy": "core", "I_MPI_WAIT_MODE": "0"},
                                    euid=0)
    assert env["PRTE_MCA_rmaps_default_mapping_policy"] == "core" and env["I_MPI_WAIT_MODE"] == "0"
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"


def test_rank_env_turns_every_family_on_off_or_leaves_it_to_the_ranks(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")   # an inherited rank variable: dropped
    monkeypatch.setenv("I_MPI_WAIT_MODE", "1")
    off, on, default = blaunch.rank_env(False), blaunch.rank_env(True), blaunch.rank_env(None)
    assert all(off[k] == menv.IDLE_SPIN[k] for k in menv.IDLE_SPIN)
    assert all(on[k] == menv.MPI_ENV_DEFAULTS[k] for k in menv.IDLE_SPIN)
    assert not any(k in default for k in menv.IDLE_SPIN)
    for env in (off, on, default):
        assert "OMPI_COMM_WORLD_RANK" not in env
        assert env["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"
        assert (env.get("OMPI_ALLOW_RUN_AS_ROOT") == "1") == (os.geteuid() == 0)


def test_mpiexec_launch_runs_the_given_venv_without_inherited_rank_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("PMI_RANK", "2")                 # inherited from an enclosing job: dropped
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")   # a user setting with a rank prefix: kept
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mpiexec").touch()
    python = str(tmp_path / "bin" / "python")
    cmd, env = menv.mpiexec_launch(["python", "-m", "mpikanel.train"], ["-n", "2"], python=python)
    assert cmd == [str(tmp_path / "bin" / "mpiexec"), "-n", "2", python, "-m", "mpikanel.train"]
    assert "PMI_RANK" not in env and env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert env["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"


def test_run_builds_the_mpiexec_command(monkeypatch):
    monkeypatch.setenv("MPIEXEC", "/opt/mpi/bin/mpiexec")
    cmd, _ = mrun.build_launch(["-n", "3", "--bind-to", "none", "--", "python", "-m", "mpikanel.train", "--quiet"])
    assert cmd == ["/opt/mpi/bin/mpiexec", "-n", "3", "--bind-to", "none", sys.executable, "-m", "mpikanel.train",
                   "--quiet"]
    with pytest.raises(SystemExit, match="no '--'"):
        mrun.build_launch(["-n", "3", "python", "x.py"])
    with pytest.raises(SystemExit, match="no program"):
        mrun.build_launch(["-n", "3", "--"])


def test_install_config_appends_once(tmp_path):
    assert mrun.install_config(str(tmp_path)) is None
    (tmp_path / "etc").mkdir()
    conf = tmp_path / "etc" / "prte-mca-params.conf"
    conf.write_text("# PRTE defaults\n")
    assert mrun.install_config(str(tmp_path)) == conf
    mrun.install_config(str(tmp_path))
    text = conf.read_text()
    assert text.startswith("# PRTE defaults\n") and text.count("rmaps_default_mapping_policy = :oversubscribe") == 1


def test_print_env_is_shell(capsys):
    assert mrun.main(["--print-env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe" in lines
    assert all(line.startswith("export ") for line in lines)


def test_launcher_runs_a_job_with_more_ranks_than_cores_without_any_mpi_settings(tmp_path):
    """No OMPI_/PRTE_/I_MPI_/MPIR_ variables at all: mpikanel.run supplies what the MPI needs
    (Open MPI as root and with 5 ranks on fewer cores refuses without them)."""
    if not (Path(sys.executable).parent / "mpiexec").exists():
        need("mpiexec", "no mpiexec next to this Python")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PRTE_", "PMIX_", "PMI_", "I_MPI_", "MPIR_CVAR", "HYDRA_"))}
    out = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "mpikanel.run", "-n", str(max(5, (os.cpu_count() or 1) + 1)), "--",
           "python", "-m", "mpikanel.train", "--quiet", "--synthetic-rows", "4000", "--epochs", "1",
           "--summary-json", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not finish in 180 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["workers"] == max(5, (os.cpu_count() or 1) + 1) - 1
    assert summary["versions"]["mpi"], "the summary names the MPI library"
