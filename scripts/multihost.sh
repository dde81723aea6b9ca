#!/usr/bin/env bash
# Run an MPI job across emulated hosts on this machine: network namespaces joined by a bridge.
#
#   scripts/multihost.sh [--transport] HOSTS NRANKS -- COMMAND...
#   scripts/multihost.sh --cleanup
#
#   sudo scripts/multihost.sh 2 4 -- python -m mpikanel.train --sync bsp
#
# Creates HOSTS hosts h0..h<HOSTS-1>: each a network namespace with its loopback up and one
# address 198.18.0.<i+1>/24 (the benchmarking range 198.18.0.0/15, nothing else) on a veth joined
# to the bridge <prefix>br0, and its own hostname (a UTS namespace, scripts/multihost-exec.sh), so
# MPI.Get_processor_name() differs per host and the MPI sees separate nodes: shared memory within
# a host, TCP between hosts. COMMAND runs as one MPI job of NRANKS ranks dealt round-robin over
# the hosts (rank r on h<r mod HOSTS>: with --servers K the servers come first, one per host),
# launched from h0 through `python -m mpikanel.run` (the project's launcher settings) with the
# MPI's remote launcher hook pointed at multihost-exec.sh instead of ssh:
#   Intel MPI / MPICH (hydra): -launcher ssh -launcher-exec multihost-exec.sh -hosts h0,h1,.. -ppn 1
#   Open MPI (prterun):        --mca plm_rsh_agent multihost-exec.sh --host h0:S,h1:S --map-by node
#   (Open MPI also gets pml ob1, btl self,sm,tcp on 198.18.0.0/24 and btl_tcp_progress_thread=1.)
# The job's environment also gets MPIKANEL_WATCH=1: every rank stays connected to a watcher process
# rank 0 starts (mpikanel.comm.watch); when a host's ranks die it names them in one line, which
# this script prints after the job (MPIKANEL_WATCH_REPORT). MPICH's hydra takes the same flags as
# Intel MPI's; only Intel MPI and Open MPI were tried.
#
# --transport   also print the MPI's own report of the transports it chose (Intel MPI: I_MPI_DEBUG=5;
#               Open MPI: btl_base_verbose) as lines starting with `multihost: transport:`.
# --cleanup     remove what an earlier run left (namespaces, veths, bridge, processes) and exit.
#
# Environment: MPIKANEL_PYTHON (the Python whose MPI runs the job; default .venv/bin/python, else
# python3), MULTIHOST_PREFIX (name prefix of namespaces, veths and bridge; default mh),
# MULTIHOST_LOCK_WAIT_S (how long to wait for another run's lock; default 600).
# On exit, error, Ctrl-C or SIGTERM it removes every namespace, veth, the bridge and every process
# it started (all run inside the namespaces); SIGINT/SIGTERM first reach the ranks (as a batch
# system signals them), which get MULTIHOST_GRACE_S (default 15) to end: a run with
# --checkpoint-dir writes its checkpoint and exits 75.
# Exit codes: COMMAND's; 2 not root or bad usage; 3 set-up failed (one line on stderr).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
HELPER=$HERE/multihost-exec.sh
P=${MULTIHOST_PREFIX:-mh}
BR=${P}br0
LOCK=/run/lock/multihost-$P.lock
SUBNET=198.18.0

say() { echo "multihost: $*" >&2; }
usage() { say "usage: multihost.sh [--transport] HOSTS NRANKS -- COMMAND...  |  multihost.sh --cleanup"; exit 2; }
setup_failed() { say "set-up failed: $*"; exit 3; }

# shellcheck source=scripts/emulated-hosts.sh
. "$HERE/emulated-hosts.sh"
our_namespaces() { hosts_namespaces "$P"; }

# kill every process in our namespaces, then remove namespaces (their veths go with them) and bridge
cleanup() {
  hosts_remove "$P"
  [ -z "${RUN_DIR:-}" ] || rm -rf "$RUN_DIR"
}

# the MPI ranks in our namespaces (their launcher gave them a rank), else every process there
rank_pids() {
  local ns pid all="" ranks=""
  for ns in $(our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      all="$all $pid"
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qE '^(PMI_RANK|OMPI_COMM_WORLD_RANK)=' && ranks="$ranks $pid"
    done
  done
  echo "${ranks:-$all}"
}

# single-quote a word for sh -c
shquote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

TRANSPORT=0
CLEAN_ONLY=0
while [ $# -gt 0 ]; do
  case $1 in
    --transport) TRANSPORT=1; shift ;;
    --cleanup) CLEAN_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  say "needs root (it creates network namespaces, veths and a bridge); run it with sudo"
  exit 2
fi
if [ "$CLEAN_ONLY" = 1 ]; then
  exec 9>"$LOCK"
  flock -w "${MULTIHOST_LOCK_WAIT_S:-600}" 9 || setup_failed "another run holds $LOCK"
  cleanup
  exit 0
fi
[ $# -ge 4 ] && [ "$3" = -- ] || usage
HOSTS=$1 NRANKS=$2; shift 3
[[ $HOSTS =~ ^[1-9][0-9]*$ && $HOSTS -le 200 && $NRANKS =~ ^[1-9][0-9]*$ ]] || usage
command -v ip >/dev/null && command -v unshare >/dev/null && command -v flock >/dev/null \
  || setup_failed "needs ip (iproute2), unshare and flock"

exec 9>"$LOCK" || setup_failed "cannot open $LOCK"
flock -w "${MULTIHOST_LOCK_WAIT_S:-600}" 9 || setup_failed "another run held $LOCK for ${MULTIHOST_LOCK_WAIT_S:-600} s"
RUN_DIR=
JOB=
GRACE_S=${MULTIHOST_GRACE_S:-15}
# a signal reaches the job first (a checkpointing run writes its checkpoint), for GRACE_S at most
on_signal() {
  local sig=$1 code=$2 end
  trap '' INT TERM
  if [ -n "$JOB" ] && kill -0 "$JOB" 2>/dev/null; then
    # shellcheck disable=SC2046
    kill -s "$sig" $(rank_pids) 2>/dev/null || true
    end=$((SECONDS + GRACE_S))
    while kill -0 "$JOB" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
    # ended in time: its own exit code (75: checkpointed, requeue me)
    kill -0 "$JOB" 2>/dev/null || { wait "$JOB" && code=0 || code=$?; }
  fi
  cleanup
  exit "$code"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
cleanup                                    # what a run killed with SIGKILL left (we hold the lock)

PY=${MPIKANEL_PYTHON:-}
[ -n "$PY" ] || { [ -x "$ROOT/.venv/bin/python" ] && PY=$ROOT/.venv/bin/python || PY=python3; }
FAMILY=$("$PY" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0].strip(chr(0)))' 2>/dev/null) \
  || setup_failed "$PY cannot load mpi4py and an MPI"
RUN_DIR=$(mktemp -d "/tmp/multihost-$P.XXXXXX") || setup_failed "mktemp"
chmod 755 "$RUN_DIR"

# the hosts: namespace, loopback, veth on the bridge, address; the hosts file names them all
hosts_create "$P" "$HOSTS" "$SUBNET" "$RUN_DIR" || setup_failed "$HOSTS_ERROR"
export MULTIHOST_PREFIX=$P MULTIHOST_DIR=$RUN_DIR MULTIHOST_SUBNET=$SUBNET MPIKANEL_WATCH=${MPIKANEL_WATCH:-1} MPIKANEL_WATCH_REPORT=$RUN_DIR/lost

# the launch: mpikanel.run (the project's launcher settings) on h0, the remote hook on the others
hostlist=$(for ((i = 0; i < HOSTS; i++)); do printf 'h%d,' "$i"; done); hostlist=${hostlist%,}
slots=$(( (NRANKS + HOSTS - 1) / HOSTS ))
case $FAMILY in
  *"Open MPI"*)
    launch=(--mca plm_rsh_agent "$HELPER" --host "$(echo "$hostlist" | sed "s/,/:$slots,/g"):$slots" --map-by node
            --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24"
            --prtemca oob_tcp_if_include "$SUBNET.0/24" --mca pml ob1 --mca btl self,sm,tcp)
    [ "$TRANSPORT" = 0 ] || export OMPI_MCA_btl_base_verbose=100
    # TCP progresses only inside MPI calls, and mpikanel's waits sleep between tests: a thread
    # of its own moves the bytes (docs/cluster.md: 1.6x the 1-host wall without it, 0.9x with)
    export OMPI_MCA_btl_tcp_progress_thread=${OMPI_MCA_btl_tcp_progress_thread:-1}
    ;;
  *)   # hydra: Intel MPI, MPICH
    launch=(-launcher ssh -launcher-exec "$HELPER" -hosts "$hostlist" -ppn 1)
    [ "$TRANSPORT" = 0 ] || export I_MPI_DEBUG=${I_MPI_DEBUG:-5}
    ;;
esac
line="exec $(shquote "$PY") -m mpikanel.run"
for w in "${launch[@]}" -n "$NRANKS" -- "$@"; do line+=" $(shquote "$w")"; done

say "$HOSTS hosts ($hostlist, $SUBNET.1-$HOSTS on $BR), $NRANKS ranks round-robin, $FAMILY"
# the job does not inherit the lock (fd 9): if this script is killed with SIGKILL, the lock goes
# with it and the next run or --cleanup removes what it left
if [ "$TRANSPORT" = 1 ]; then
  # the MPI's own words about its transports, marked; everything else passes through unchanged
  "$HELPER" h0 "$line" 9>&- > >(exec 9>&-; awk -f "$HERE/multihost-transport.awk") 2>&1 &
else
  "$HELPER" h0 "$line" 9>&- &
fi
JOB=$!
set +e
wait "$JOB"
rc=$?
set -e
[ ! -s "$RUN_DIR/lost" ] || cat "$RUN_DIR/lost" >&2     # the ranks' watch named lost ranks
# the EXIT trap cleans up
exit "$rc"
