#!/usr/bin/env bash
# Run a command on an emulated host of scripts/multihost.sh, as ssh would run it on a real one:
#
#   scripts/multihost-exec.sh [SSH OPTIONS...] HOST COMMAND...
#
# HOST is a host name (h0, h1, ...) or its address ($MULTIHOST_SUBNET.1, ...). The command runs in that
# host's network namespace (its own loopback and address), in a UTS namespace whose hostname is
# HOST (so MPI.Get_processor_name() tells the hosts apart), with the run's hosts file in place of
# /etc/hosts (h0.. resolve to their addresses). Like ssh, it joins COMMAND's words and hands them
# to `sh -c`. Leading options (hydra passes -x, Open MPI none) are ignored, as the MPI launchers
# pass them to ssh. This is the remote launcher hook of both MPI families: hydra's
# `-launcher ssh -launcher-exec`, Open MPI's `--mca plm_rsh_agent`.
#
# Reads MULTIHOST_PREFIX (the namespace prefix), MULTIHOST_DIR (the run's directory, which holds
# `hosts`) and MULTIHOST_SUBNET (default 198.18.0) from the environment that multihost.sh exports
# to the job (slurm-local.sh: to each slurmd).
set -euo pipefail

while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
  case $1 in
    -l|-p|-o|-i|-F|-E) shift 2 ;;      # ssh options with an argument
    *) shift ;;
  esac
done
[ $# -ge 2 ] || { echo "multihost-exec: usage: multihost-exec.sh HOST COMMAND..." >&2; exit 2; }
host=$1; shift
prefix=${MULTIHOST_PREFIX:?multihost-exec: MULTIHOST_PREFIX unset (run under scripts/multihost.sh)}
dir=${MULTIHOST_DIR:?multihost-exec: MULTIHOST_DIR unset (run under scripts/multihost.sh)}
subnet=${MULTIHOST_SUBNET:-198.18.0}
case $host in
  "$subnet".*) host=h$(( ${host##*.} - 1 )) ;;
  h[0-9]*) ;;
  *) host=$(awk -v h="$host" '$2 == h {print $2; exit}' "$dir/hosts") ;;
esac
[ -n "$host" ] && ip netns pids "$prefix$host" >/dev/null 2>&1 || {
  echo "multihost-exec: no emulated host '$host' (namespace $prefix$host)" >&2; exit 255; }
# ip netns exec gives the command a private mount namespace: the hosts file is bound only there
exec ip netns exec "$prefix$host" unshare --uts -- sh -c \
  'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec sh -c "$*"' \
  multihost-exec "$host" "$dir/hosts" "$@"
