#!/usr/bin/env bash
# Set up (venv + project with its test extra, MPICH wheel included) and run the whole test suite:
# plain pytest (pure logic + end-to-end mpiexec subprocess runs), then pytest-mpi at 2 and 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$PWD/.numba-cache}
run() { echo "+ $*"; timeout --kill-after=30 "${STEP_TIMEOUT:-1200}" "$@"; }
run .venv/bin/python -m pytest -q -p no:cacheprovider tests
for n in 2 4; do
  run .venv/bin/mpiexec -n "$n" .venv/bin/python -m pytest -q -p no:cacheprovider --with-mpi tests/mpi
done
