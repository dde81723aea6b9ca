"""Test set-up: make tests/ importable, end a whole MPI test run when one rank fails, turn the
needs_fashion mark into need_fashion_mnist, print a stage's counts in one line, mark the tests that
launch MPI (e2e), record their times, and pick those the second MPI runs inside CI's time."""
import json
import os
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from need import need_fashion_mnist  # noqa: E402  (tests/ importable first)
from machine_lock import machine_lock  # noqa: E402
from second_mpi import matches, pick  # noqa: E402


#: stage 1 writes each end-to-end test's time (seconds, by node id) to this file
DURATIONS_ENV = "MPIKANEL_E2E_DURATIONS"
#: the second MPI's stage reads them from this one
TIMES_ENV = "MPIKANEL_E2E_TIMES"
#: the second MPI's end-to-end stage: at most this many seconds of tests by stage 1's times (0: all)
BUDGET_ENV = "MPIKANEL_SECOND_MPI_BUDGET_S"
#: two stages at once (scripts/test.sh): each end-to-end test holds this file's lock, shared, or
#: exclusively when marked `alone` (it measures time: paced runs, waits, stragglers)
LOCK_ENV = "MPIKANEL_TEST_LOCK"
#: the MPI behaviour every MPI must show, run under the second MPI whatever the budget: training
#: under ASP, BSP bitwise on 1 and 2 servers, a stop checkpoint and its resume, a killed server rank,
#: ESP's round trips and PSP's plan, idle ranks yielding the CPU, a paced run, runs across hosts
ALWAYS = (
    "tests/test_train_e2e.py::test_sync_models_converge_on_synthetic[sync1]",
    "tests/test_servers_e2e.py::test_bsp_gives_bitwise_the_same_model_on_one_and_two_servers",
    "tests/test_checkpoint_e2e.py::test_signal_checkpoints_exits_75_and_resume_latest_finishes[10]",
    "tests/test_checkpoint_e2e.py::test_sigkill_ends_job_and_latest_checkpoint_resumes[server]",
    "tests/test_esp_psp_e2e.py::test_esp_round_trips_see_the_link_and_every_merge_is_counted",
    "tests/test_esp_psp_e2e.py::test_psp_gives_fast_workers_more_steps_under_a_straggler",
    "tests/test_bench_server.py::test_project_default_blocked_rank_yields_cpu",
    "tests/test_pacing.py::test_a_paced_run_lasts_its_modeled_steps_and_says_so",
    "tests/test_multihost_e2e.py",
)
_durations: dict[str, float] = {}


@cache
def _launches_mpi(path: Path) -> bool:
    """A test module of tests/ (not tests/mpi, pytest-mpi's stage, nor tests/slurm) that imports
    tests/launch.py or names mpiexec runs MPI jobs."""
    if path.parent != Path(__file__).parent:
        return False
    text = path.read_text()
    return "from launch import" in text or "import launch" in text or "mpiexec" in text


@pytest.hookimpl(tryfirst=True)     # before -m selects by the marks set here
def pytest_collection_modifyitems(config, items):
    """Mark the tests of modules that launch MPI `e2e`; with BUDGET_ENV set, keep of those ALWAYS and
    then the quickest of the rest (by TIMES_ENV's times) up to the budget, and say what was left."""
    e2e = []
    for item in items:
        if _launches_mpi(Path(item.path)):
            item.add_marker(pytest.mark.e2e)
            e2e.append(item)
    budget = float(os.environ.get(BUDGET_ENV) or 0)
    if budget <= 0 or Path(config.rootpath) != Path(__file__).parent.parent:    # not a nested session's
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter else print
    files = {i.nodeid.split("::")[0] for i in e2e}
    missing = [a for a in ALWAYS if a.split("::")[0] in files and not any(matches(i.nodeid, a) for i in e2e)]
    if missing:                 # a test renamed in a module that was collected
        raise pytest.UsageError(f"tests/conftest.py ALWAYS names no collected end-to-end test: {missing}")
    # stage 1 of an earlier run in this checkout wrote them; without them (a fresh clone: this stage runs
    # beside that run's stage 1) no other test's time is known, and those every MPI must pass run alone
    path = Path(os.environ.get(TIMES_ENV) or "")
    times = json.loads(path.read_text()) if path.is_file() else {}
    if not times:
        say(f"second MPI: no end-to-end test times at '{path}' (stage 1 writes them at its end): "
            "only the tests every MPI must pass (tests/conftest.py ALWAYS)")
    _, left_ids, spent = pick([i.nodeid for i in e2e], times, ALWAYS, budget)
    if not left_ids:
        return
    gone = set(left_ids)
    left = [i for i in e2e if i.nodeid in gone]
    config.hook.pytest_deselected(items=left)
    items[:] = [i for i in items if i.nodeid not in gone]
    per_file = Counter(i.nodeid.split("::")[0].removeprefix("tests/") for i in left)
    what = (f"{spent:.0f} s by the default MPI's times (budget {budget:g} s); the {len(left)} longer ones "
            f"({sum(times.get(i.nodeid, 0.0) for i in left):.0f} s)" if times else f"the other {len(left)}")
    say(f"second MPI: {len(e2e) - len(left)} of {len(e2e)} end-to-end tests, {what} run in the full run, "
        f"{BUDGET_ENV}=0 bash scripts/test.sh: " + ", ".join(f"{f} {n}" for f, n in sorted(per_file.items())))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With LOCK_ENV set, an end-to-end test runs (set-up to teardown) under the machine's lock."""
    path = os.environ.get(LOCK_ENV)
    if not path or "e2e" not in item.keywords:
        return (yield)
    with machine_lock(path, alone=item.get_closest_marker("alone") is not None):
        return (yield)


def pytest_sessionfinish(session):
    """With DURATIONS_ENV set, write the end-to-end tests' times (setup + call + teardown) there."""
    out = os.environ.get(DURATIONS_ENV)
    if out and _durations:
        Path(out).write_text(json.dumps(_durations, indent=0, sort_keys=True))


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
    """Record an end-to-end test's time; under mpiexec, a failure on one rank would leave the others
    blocked: abort them all."""
    if "e2e" in report.keywords:
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration
    if not report.failed or "mpi4py.MPI" not in sys.modules:
        return
    from mpi4py import MPI
    if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
        rank = MPI.COMM_WORLD.Get_rank()
        sys.stderr.write(f"\n[rank {rank}] {report.longreprtext}\n[rank {rank}] test {report.nodeid} failed: "
                         "aborting all ranks\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
