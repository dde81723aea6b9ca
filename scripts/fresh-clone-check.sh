#!/usr/bin/env bash
# Run the README's two commands (the quickstart, then the test command) on fresh clones of COMMIT,
# RUNS times in a row, alternating a normal user (odd runs) and root (even runs), with pip's and the
# user's caches wiped before each run, as a new user on a fresh machine would start.
#
#   sudo scripts/fresh-clone-check.sh [--user NAME] [--log FILE] COMMIT [RUNS]
#
# Needs root (to switch users and wipe caches); NAME (default tester) must exist. One line per run
# goes to FILE (default fresh-clone-check.log): user, exit codes, seconds, load average at start and
# end, and each test stage's counts. Exit code: 0 when every run passed, 1 otherwise.
set -uo pipefail
USER_NAME=tester; LOG=fresh-clone-check.log
while [ $# -gt 0 ]; do
  case $1 in
    --user) USER_NAME=$2; shift 2 ;;
    --log) LOG=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--user NAME] [--log FILE] COMMIT [RUNS]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "fresh-clone-check: needs root (switches users, wipes caches)" >&2; exit 2; }
id "$USER_NAME" >/dev/null 2>&1 || { echo "fresh-clone-check: no user $USER_NAME (useradd -m $USER_NAME)" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd); COMMIT=$1; RUNS=${2:-5}
LOG=$(realpath -m "$LOG")
home=$(getent passwd "$USER_NAME" | cut -d: -f6)
QUICKSTART='python3 -m venv .venv && .venv/bin/pip install -e ".[intelmpi]" && .venv/bin/mpiexec -n 4 .venv/bin/python -m mpikanel.train'
failed=0
for i in $(seq 1 "$RUNS"); do
  if [ $((i % 2)) = 1 ]; then who=$USER_NAME; else who=root; fi
  dir=$(mktemp -d /tmp/fresh-clone-XXXXXX)
  git clone -q "$REPO" "$dir" && git -C "$dir" checkout -q "$COMMIT" || { echo "clone of $COMMIT failed" >&2; exit 1; }
  rm -rf /root/.cache/pip "$home/.cache"
  run="cd $dir && (bash -c '$QUICKSTART') > quickstart.log 2>&1; echo \$? > quickstart.rc; bash scripts/test.sh > test.log 2>&1; echo \$? > test.rc"
  start=$(date +%s); l0=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ "$who" = root ]; then bash -c "$run"; else chown -R "$USER_NAME:" "$dir"; su - "$USER_NAME" -c "$run"; fi
  qs=$(cat "$dir/quickstart.rc"); ts=$(cat "$dir/test.rc")
  [ "$qs" = 0 ] && [ "$ts" = 0 ] || failed=1
  stages=$(grep -a '^stage ' "$dir/test.log" | tr '\n' ' ')
  echo "run$i $who commit=$COMMIT quickstart_rc=$qs test_rc=$ts secs=$(( $(date +%s) - start ))" \
       "load_start=[$l0] load_end=[$(cut -d' ' -f1-3 /proc/loadavg)] $(date -u +%FT%H:%M) :: $stages" >> "$LOG"
  [ "$qs" = 0 ] && [ "$ts" = 0 ] && rm -rf "$dir"      # a failed run's clone stays for its logs
done
exit $failed
