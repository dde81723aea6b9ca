#!/usr/bin/env bash
# Start, stop or inspect a real single-node SLURM cluster on this machine, without systemd.
#
#   scripts/slurm-local.sh start  [DIR]   # install if missing, start, wait for the node, print SLURM_CONF
#   scripts/slurm-local.sh status [DIR]   # daemons alive? node state? (exit 0 only if the node is usable)
#   scripts/slurm-local.sh stop   [DIR]   # kill the daemons by their pid files
#
#   eval "$(scripts/slurm-local.sh start | grep '^export ')"; sbatch --wait jobs/slurm/train.sbatch
#
# DIR (default /tmp/mpikanel-slurm) holds slurm.conf, pid files, state, spool and logs.
# What it does (docs: /work/shared/notes/hpc-practice.md; used by tests/slurm):
#   - installs Debian's slurm-wlm, slurmctld, slurmd, slurm-client and munge with apt-get if
#     slurmctld/slurmd/sbatch/munged are missing (needs root; a no-op when they are installed);
#   - starts munged as the munge user on its default socket unless a working munged answers
#     already (then it is left alone, also by `stop`);
#   - writes a minimal slurm.conf: one node, NodeHostname = `hostname`, CPUs=$SLURM_LOCAL_CPUS
#     (default 4) with SlurmdParameters=config_overrides so a 2-core machine may advertise 4
#     CPUs, one OverSubscribe partition `debug`, JobRequeue=1, no accounting;
#   - starts slurmctld (fresh state: -c) and slurmd as daemons with pid files in DIR/run and
#     waits (bounded, $SLURM_LOCAL_WAIT_S, default 30 s) until the node is idle.
# Ports: SLURM_LOCAL_CTLD_PORT (6817), SLURM_LOCAL_SLURMD_PORT (6818). SLURM_LOCAL_CPUS (4),
# SLURM_LOCAL_MIN_JOB_AGE (4: `sbatch --wait` then polls every 2 s instead of backing off to 32 s).
# Idempotent: `start` on a running cluster only re-checks the node; `stop` on a stopped one is a
# no-op. Every wait is bounded; nothing here can hang. Exit codes: 0 ok, 1 failure (reason on
# stderr), 3 cannot install/start here (not root, no apt, ...): callers may skip on 3.
set -uo pipefail

ACTION=${1:-status}
DIR=${2:-${SLURM_LOCAL_DIR:-/tmp/mpikanel-slurm}}
CPUS=${SLURM_LOCAL_CPUS:-4}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-6818}
WAIT_S=${SLURM_LOCAL_WAIT_S:-30}
# MinJobAge <= 4 keeps `sbatch --wait` polling every 2 s (it backs off to 8 and 32 s only while
# the sleep is below MinJobAge/2); finished jobs leave `scontrol show job` after a few seconds
MIN_JOB_AGE=${SLURM_LOCAL_MIN_JOB_AGE:-4}
NODE=localhost
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }
cannot() { say "cannot run SLURM here: $*"; exit 3; }

# pid from a pid file if that process is alive, else empty
alive_pid() {
  local f=$1 pid
  [ -s "$f" ] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# wait up to $2 seconds for command "$3..." to succeed
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  while [ "$SECONDS" -lt "$end" ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.3
  done
  say "timed out after ${secs}s waiting for $what"
  return 1
}

have_slurm() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
    command -v munged >/dev/null && command -v munge >/dev/null
}

install() {
  have_slurm && return 0
  [ "$(id -u)" = 0 ] || cannot "slurm/munge are not installed and this is not root (apt-get needs root)"
  command -v apt-get >/dev/null || cannot "slurm/munge are not installed and there is no apt-get"
  say "installing slurm-wlm munge slurmctld slurmd slurm-client (apt-get, quiet)"
  local pkgs=(slurm-wlm munge slurmctld slurmd slurm-client)
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 300 apt-get install -y -q "${pkgs[@]}" >"${TMPDIR:-/tmp}/slurm-local-apt.log" 2>&1; then
    timeout 300 apt-get update -q >>"${TMPDIR:-/tmp}/slurm-local-apt.log" 2>&1
    timeout 300 apt-get install -y -q "${pkgs[@]}" >>"${TMPDIR:-/tmp}/slurm-local-apt.log" 2>&1 ||
      cannot "apt-get install ${pkgs[*]} failed (log: ${TMPDIR:-/tmp}/slurm-local-apt.log)"
  fi
  have_slurm || cannot "slurm/munge binaries still missing after apt-get install"
}

munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

start_munge() {
  munge_ok && return 0
  [ "$(id -u)" = 0 ] || cannot "munged is not running and starting it needs root"
  id munge >/dev/null 2>&1 || cannot "no munge user (munge package incomplete?)"
  [ -s /etc/munge/munge.key ] || {
    say "creating /etc/munge/munge.key"
    (command -v mungekey >/dev/null && timeout 10 mungekey --create --force) ||
      timeout 10 dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  }
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  rm -f /run/munge/munged.pid
  if command -v runuser >/dev/null; then
    timeout 10 runuser -u munge -- /usr/sbin/munged --force
  else
    timeout 10 su -s /bin/sh munge -c "/usr/sbin/munged --force"
  fi || die "munged failed to start (see /var/log/munge/munged.log)"
  wait_for "munged" 10 munge_ok || die "munged does not answer (see /var/log/munge/munged.log)"
  cp /run/munge/munged.pid "$DIR/run/munged.pid" 2>/dev/null   # ours: `stop` ends it
}

write_conf() {
  local host
  host=$(hostname)
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a single-node SLURM for local runs and tests.
ClusterName=mpikanel
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=$MIN_JOB_AGE
NodeName=$NODE NodeHostname=$host CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

node_state() { timeout 5 sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -1; }
node_idle() { case "$(node_state)" in idle|mixed|allocated) return 0 ;; *) return 1 ;; esac; }
ctld_up() { timeout 5 scontrol ping 2>/dev/null | grep -q UP; }

start() {
  install
  mkdir -p "$DIR"/run "$DIR"/state "$DIR"/spool "$DIR"/log || die "cannot create $DIR"
  start_munge
  local ctld slurmd
  ctld=$(alive_pid "$DIR/run/slurmctld.pid")
  slurmd=$(alive_pid "$DIR/run/slurmd.pid")
  if [ -z "$ctld" ] || [ -z "$slurmd" ]; then
    [ -n "$ctld$slurmd" ] && { say "half-running cluster in $DIR: restarting it"; stop_daemons; }
    write_conf
    rm -f "$DIR/run/slurmctld.pid" "$DIR/run/slurmd.pid"
    timeout 20 slurmctld -c -f "$CONF" || die "slurmctld failed to start (log: $DIR/log/slurmctld.log)"
    wait_for "slurmctld" 15 ctld_up || die "slurmctld does not answer (log: $DIR/log/slurmctld.log)"
    timeout 20 slurmd -f "$CONF" -N "$NODE" || die "slurmd failed to start (log: $DIR/log/slurmd.log)"
  fi
  if ! wait_for "node $NODE to become idle" "$WAIT_S" node_idle; then
    # a node left down/drained by an earlier run: try to resume it once
    timeout 5 scontrol update nodename="$NODE" state=resume >/dev/null 2>&1
    wait_for "node $NODE to become idle" 10 node_idle ||
      die "node $NODE is '$(node_state)' (logs: $DIR/log/)"
  fi
  say "up: node $NODE $(node_state), $CPUS CPUs, conf $CONF"
  echo "export SLURM_CONF=$CONF"
}

stop_daemons() {
  local f pid
  for f in "$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
    pid=$(alive_pid "$f") || { rm -f "$f"; continue; }
    kill -TERM "$pid" 2>/dev/null
    local end=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { say "$(basename "$f" .pid) ($pid) ignored TERM: KILL"; kill -KILL "$pid" 2>/dev/null; }
    rm -f "$f"
  done
}

stop() {
  [ -d "$DIR/run" ] || { say "nothing to stop in $DIR"; return 0; }
  stop_daemons
  say "stopped ($DIR)"
}

status() {
  local rc=0 n pid
  for n in munged slurmctld slurmd; do
    if pid=$(alive_pid "$DIR/run/$n.pid"); then echo "$n: running (pid $pid)"
    elif [ "$n" = munged ] && munge_ok; then echo "munged: running (not started by this script)"
    else echo "$n: not running"; rc=1; fi
  done
  if [ "$rc" = 0 ]; then
    echo "node $NODE: $(node_state)"
    node_idle || rc=1
    echo "export SLURM_CONF=$CONF"
  fi
  return $rc
}

case "$ACTION" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
