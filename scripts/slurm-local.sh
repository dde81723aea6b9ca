#!/usr/bin/env bash
# Start, stop or inspect a real SLURM cluster on this machine (one node, or several emulated ones), without systemd.
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
# Several nodes (SLURM_LOCAL_NODES=N > 1, root): N emulated hosts h0..h<N-1> as scripts/multihost.sh
# makes them (scripts/emulated-hosts.sh: network namespaces <prefix>h<i> (SLURM_LOCAL_PREFIX, default
# sl) with SLURM_LOCAL_SUBNET.<i+1> (default 198.18.1, in the benchmarking range) on a bridge, each
# with its own hostname), one slurmd per host (NodeName h<i>, started inside it through
# scripts/multihost-exec.sh, so every process of a job step runs on its node's network stack), and
# slurmctld on this machine at SLURM_LOCAL_SUBNET.254, the bridge's address. Jobs then span nodes
# (`sbatch -N 2`) and MPI between them goes over TCP. `stop` also removes the hosts.
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
NODES=${SLURM_LOCAL_NODES:-1}
PREFIX=${SLURM_LOCAL_PREFIX:-sl}
SUBNET=${SLURM_LOCAL_SUBNET:-198.18.1}
HERE=$(cd "$(dirname "$0")" && pwd)
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }
cannot() { say "cannot run SLURM here: $*"; exit 3; }

[[ $NODES =~ ^[1-9][0-9]*$ && $NODES -le 64 ]] || { say "SLURM_LOCAL_NODES must be 1-64, not '$NODES'"; exit 2; }
# the node names: this machine itself, or the emulated hosts h0..
if [ "$NODES" = 1 ]; then NAMES=(localhost); else NAMES=(); for ((i = 0; i < NODES; i++)); do NAMES+=("h$i"); done; fi
# shellcheck source=scripts/emulated-hosts.sh
. "$HERE/emulated-hosts.sh"

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
  local i ctld_host nodes_line
  if [ "$NODES" = 1 ]; then
    ctld_host=localhost
    nodes_line="NodeName=localhost NodeHostname=$(hostname) CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
  else
    # the controller on this machine, reached by the hosts at the bridge's address
    ctld_host="localhost($SUBNET.254)"
    nodes_line=$(for ((i = 0; i < NODES; i++)); do
      echo "NodeName=h$i NodeHostname=h$i NodeAddr=$SUBNET.$((i + 1)) CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
    done)
  fi
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a $NODES-node SLURM for local runs and tests.
ClusterName=mpikanel
SlurmctldHost=$ctld_host
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
SlurmdPidFile=$DIR/run/slurmd-%n.pid
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=$MIN_JOB_AGE
$nodes_line
PartitionName=debug Nodes=$(IFS=,; echo "${NAMES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

# the state of every node, one word per line (idle, mixed, down, ...)
node_states() { timeout 5 sinfo -h -N -o %T 2>/dev/null; }
node_state() { node_states | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}'; }
nodes_idle() {
  local up
  up=$(node_states | grep -cE '^(idle|mixed|allocated)$')
  [ "$up" = "$NODES" ]
}
ctld_up() { timeout 5 scontrol ping 2>/dev/null | grep -q UP; }

# start the slurmd of node $1: here, or inside its emulated host
start_slurmd() {
  local name=$1
  if [ "$NODES" = 1 ]; then
    timeout 20 slurmd -f "$CONF" -N "$name"
  else
    MULTIHOST_PREFIX=$PREFIX MULTIHOST_DIR=$DIR/net MULTIHOST_SUBNET=$SUBNET \
      timeout 20 "$HERE/multihost-exec.sh" "$name" "$(cgroup_mounts) exec slurmd -f '$CONF' -N '$name'"
  fi
}

# `ip netns exec` gives a host a /sys of its own (its network devices) without the cgroup
# hierarchies slurmd needs: the commands that mount this machine's again there, as they are here
cgroup_mounts() {
  awk '$2 == "/sys/fs/cgroup" || index($2, "/sys/fs/cgroup/") == 1 {print $3, $2, $4}' /proc/self/mounts |
    while read -r fstype dir opts; do
      case $fstype in
        tmpfs) echo "mount -t tmpfs -o mode=755 cgroup_root $dir &&" ;;
        cgroup|cgroup2) echo "mkdir -p $dir && mount -t $fstype -o $opts $fstype $dir &&" ;;
      esac
    done
}

slurmds_alive() {
  local name
  for name in "${NAMES[@]}"; do alive_pid "$DIR/run/slurmd-$name.pid" >/dev/null || return 1; done
}

start() {
  install
  mkdir -p "$DIR"/run "$DIR"/state "$DIR"/spool "$DIR"/log || die "cannot create $DIR"
  start_munge
  local ctld name
  ctld=$(alive_pid "$DIR/run/slurmctld.pid")
  if [ -z "$ctld" ] || ! slurmds_alive; then
    if [ -n "$ctld" ] || compgen -G "$DIR/run/slurmd*.pid" >/dev/null; then
      say "half-running cluster in $DIR: restarting it"; stop_daemons
    fi
    if [ "$NODES" -gt 1 ]; then
      [ "$(id -u)" = 0 ] || cannot "$NODES emulated nodes need root (network namespaces)"
      { command -v ip && command -v unshare; } >/dev/null || cannot "$NODES emulated nodes need ip (iproute2) and unshare"
      hosts_remove "$PREFIX"
      { mkdir -p "$DIR/net" && chmod 755 "$DIR/net" && echo "$PREFIX" >"$DIR/net/prefix"; } || die "cannot create $DIR/net"
      hosts_create "$PREFIX" "$NODES" "$SUBNET" "$DIR/net" 254 || die "emulated hosts: $HOSTS_ERROR"
    fi
    write_conf
    rm -f "$DIR"/run/slurmctld.pid "$DIR"/run/slurmd*.pid
    timeout 20 slurmctld -c -f "$CONF" || die "slurmctld failed to start (log: $DIR/log/slurmctld.log)"
    wait_for "slurmctld" 15 ctld_up || die "slurmctld does not answer (log: $DIR/log/slurmctld.log)"
    for name in "${NAMES[@]}"; do
      start_slurmd "$name" || die "slurmd of $name failed to start (log: $DIR/log/slurmd-$name.log)"
    done
  fi
  if ! wait_for "$NODES node(s) to become idle" "$WAIT_S" nodes_idle; then
    # a node left down/drained by an earlier run: try to resume it once
    timeout 5 scontrol update nodename="$(IFS=,; echo "${NAMES[*]}")" state=resume >/dev/null 2>&1
    wait_for "$NODES node(s) to become idle" 10 nodes_idle ||
      die "nodes are '$(node_state)' (logs: $DIR/log/)"
  fi
  say "up: $NODES node(s) ${NAMES[*]}: $(node_state), $CPUS CPUs each, conf $CONF"
  echo "export SLURM_CONF=$CONF"
}

# end the daemons of the pid files given
stop_pids() {
  local f pid
  for f in "$@"; do
    [ -e "$f" ] || continue
    pid=$(alive_pid "$f") || { rm -f "$f"; continue; }
    kill -TERM "$pid" 2>/dev/null
    local end=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { say "$(basename "$f" .pid) ($pid) ignored TERM: KILL"; kill -KILL "$pid" 2>/dev/null; }
    rm -f "$f"
  done
}

# the SLURM daemons and the emulated hosts (munged stays: a restart needs it)
stop_daemons() {
  stop_pids "$DIR"/run/slurmd*.pid "$DIR/run/slurmctld.pid"
  # the emulated hosts, and anything a job left running in them
  if [ -s "$DIR/net/prefix" ]; then
    hosts_remove "$(cat "$DIR/net/prefix")"
    rm -rf "$DIR/net"
  fi
}

stop() {
  [ -d "$DIR/run" ] || { say "nothing to stop in $DIR"; return 0; }
  stop_daemons
  stop_pids "$DIR/run/munged.pid"
  say "stopped ($DIR)"
}

status() {
  local rc=0 pid name
  if pid=$(alive_pid "$DIR/run/munged.pid"); then echo "munged: running (pid $pid)"
  elif munge_ok; then echo "munged: running (not started by this script)"
  else echo "munged: not running"; rc=1; fi
  if pid=$(alive_pid "$DIR/run/slurmctld.pid"); then echo "slurmctld: running (pid $pid)"
  else echo "slurmctld: not running"; rc=1; fi
  for name in "${NAMES[@]}"; do
    if pid=$(alive_pid "$DIR/run/slurmd-$name.pid"); then echo "slurmd $name: running (pid $pid)"
    else echo "slurmd $name: not running"; rc=1; fi
  done
  if [ "$rc" = 0 ]; then
    echo "nodes: $(node_state)"
    nodes_idle || rc=1
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
