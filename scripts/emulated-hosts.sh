# Emulated hosts on one machine: network namespaces joined by a bridge (sourced, not run).
# Used by scripts/multihost.sh (one MPI job) and scripts/slurm-local.sh (one slurmd per host).
#
#   hosts_create PREFIX HOSTS SUBNET DIR [BRIDGE_HOST]
#       hosts h0..h<HOSTS-1>: namespace PREFIXh<i> with its loopback up and SUBNET.<i+1>/24 on a
#       veth (PREFIXv<i> outside, eth0 inside) joined to the bridge PREFIXbr0; DIR/hosts names
#       them (h<i> -> SUBNET.<i+1>). BRIDGE_HOST (1-253, none by default): the bridge gets
#       SUBNET.<BRIDGE_HOST> too, so this machine's own processes (a SLURM controller) reach the
#       hosts and the hosts reach them. SUBNET is three octets within 198.18.0.0/15 (the
#       benchmarking range, nothing else). On failure: returns 1 with HOSTS_ERROR set.
#   hosts_remove PREFIX
#       kill every process inside PREFIX's namespaces, delete them (their veths go with them),
#       the bridge and any veth left outside.
#   hosts_namespaces PREFIX     the namespaces of PREFIX that exist now
#
# Run a command on a host with scripts/multihost-exec.sh (MULTIHOST_PREFIX, MULTIHOST_DIR,
# MULTIHOST_SUBNET in its environment), as ssh would on a real one.

hosts_namespaces() { ip netns list 2>/dev/null | awk -v p="$1" '$1 ~ "^" p "h[0-9]+$" {print $1}'; }

hosts_remove() {
  local p=$1 ns pids round v
  for round in 1 2 3; do
    pids=""
    for ns in $(hosts_namespaces "$p"); do pids="$pids $(ip netns pids "$ns" 2>/dev/null || true)"; done
    [ -n "${pids// /}" ] || break
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.2
  done
  for ns in $(hosts_namespaces "$p"); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "${p}br0" 2>/dev/null || true
  for v in $(ip -o link show 2>/dev/null | awk -F': ' -v p="${p}v" 'index($2, p) == 1 {sub(/@.*/, "", $2); print $2}'); do
    ip link del "$v" 2>/dev/null || true
  done
}

hosts_create() {
  local p=$1 n=$2 subnet=$3 dir=$4 bridge_host=${5:-} i ns err
  HOSTS_ERROR=
  case $subnet in
    198.18.[0-9]*|198.19.[0-9]*) ;;
    *) HOSTS_ERROR="subnet $subnet is outside the benchmarking range 198.18.0.0/15"; return 1 ;;
  esac
  err=$dir/hosts-setup.err
  {
    echo "127.0.0.1 localhost"
    for ((i = 0; i < n; i++)); do echo "$subnet.$((i + 1)) h$i"; done
  } >"$dir/hosts" || { HOSTS_ERROR="cannot write $dir/hosts"; return 1; }
  { ip link add "${p}br0" type bridge && ip link set "${p}br0" up; } 2>"$err" ||
    { HOSTS_ERROR="bridge ${p}br0: $(head -1 "$err")"; return 1; }
  if [ -n "$bridge_host" ]; then
    ip addr add "$subnet.$bridge_host/24" dev "${p}br0" 2>"$err" ||
      { HOSTS_ERROR="bridge address $subnet.$bridge_host: $(head -1 "$err")"; return 1; }
  fi
  for ((i = 0; i < n; i++)); do
    ns=${p}h$i
    {
      ip netns add "$ns" &&
      ip link add "${p}v$i" type veth peer name eth0 netns "$ns" &&
      ip link set "${p}v$i" master "${p}br0" up &&
      ip -n "$ns" link set lo up &&
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up
    } 2>"$err" || { HOSTS_ERROR="host h$i: $(head -1 "$err")"; return 1; }
  done
  rm -f "$err"
}
