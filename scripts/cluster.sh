#!/usr/bin/env bash
# A cluster of N "nodes" on this machine, for running and testing zero across hosts.
#
#   scripts/cluster.sh up N [--rate 1gbit] [--delay 0.5ms] [--dir build/cluster] [--id 17]
#   scripts/cluster.sh down [--dir build/cluster] [--id 17]
#   scripts/cluster.sh check            # exit 0 when this machine can make one, else say why
#
# Each node is a Linux network namespace (its own veth interface, on a bridge with the others),
# with its own hostname (UTS namespace), its own /dev/shm (a tmpfs in its own mount namespace)
# and its own System V IPC: nothing crosses between nodes but TCP over the bridge. Everything
# else (the file system, so run directories and checkpoints) is shared, as a cluster's shared
# file system would be. Open MPI starts ranks on the nodes the way it does over ssh: its remote
# agent (plm_rsh_agent) is DIR/node-shell, which enters the node's namespaces instead of logging
# in. `up` writes:
#   DIR/hostfile       node1 slots=S ... nodeN (S: this machine's cores), for mpirun/zero-run
#   DIR/hostfile.mca   the MCA parameters the nodes need (zero-run --hostfile reads it; with
#                      plain mpirun: `mpirun $(cat DIR/hostfile.mca.args) ...`): the agent,
#                      the interfaces, and TCP keepalive on Open MPI's own channel (an idle
#                      daemon silent for 10 s is lost: a node whose link goes down ends the job
#                      in seconds, not after the kernel's retransmission timeout)
# The link: node k is 10.213.ID.k on bridge zero-brID (mpirun itself, on this machine, reaches
# the nodes' daemons at 10.213.ID.254); MPI's TCP transport and Open MPI's own channel use that
# subnet only. Clusters of different --id (1-250) coexist (the tests use their own). --rate shapes every node's link in both directions (tc tbf); --delay adds one-way
# latency (tc netem, where the kernel has it: this script says when it does not). Idempotent:
# `up` first takes down what an earlier `up` made.
set -euo pipefail
cd "$(dirname "$0")/.."

id=17
dir=build/cluster
rate=""
delay=""
action="${1:-}"; [ $# -gt 0 ] && shift
nodes=""
if [ "$action" = up ]; then
  nodes="${1:-}"; [ $# -gt 0 ] && shift
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] && [ "$nodes" -le 64 ] ||
    { echo "cluster.sh up: the number of nodes must be 1 to 64, got '$nodes'" >&2; exit 2; }
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="${2:?--rate needs a value, e.g. 1gbit}"; shift 2 ;;
    --delay) delay="${2:?--delay needs a value, e.g. 0.5ms}"; shift 2 ;;
    --dir) dir="${2:?--dir needs a value}"; shift 2 ;;
    --id) id="${2:?--id needs a value}"; shift 2 ;;
    *) echo "cluster.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

[[ "$id" =~ ^[1-9][0-9]{0,2}$ ]] && [ "$id" -le 250 ] ||
  { echo "cluster.sh: --id must be 1 to 250, got '$id'" >&2; exit 2; }
subnet="10.213.$id"
bridge="zero-br$id"
prefix="zero$id"  # of the namespaces (zeroID-nodeK) and the veth pairs (zeroID-vK, zeroID-pK)

# What a cluster needs; prints the first thing missing and fails.
check() {
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (network namespaces, veth, bridge)"; return 1; }
  local tool
  for tool in ip tc nsenter unshare mpirun setsid; do
    command -v "$tool" >/dev/null || { echo "cluster.sh: '$tool' is not installed"; return 1; }
  done
  ip netns add zero-probe 2>/dev/null || { echo "cluster.sh: cannot make a network namespace (ip netns add)"; return 1; }
  local ok=1
  ip link add zero-probe0 type veth peer name zero-probe1 2>/dev/null || { echo "cluster.sh: no veth support"; ok=0; }
  ip link del zero-probe0 2>/dev/null || true
  if [ "$ok" = 1 ]; then
    ip link add zero-probe-br type bridge 2>/dev/null || { echo "cluster.sh: no bridge support"; ok=0; }
    ip link del zero-probe-br 2>/dev/null || true
  fi
  if [ "$ok" = 1 ]; then
    ip netns exec zero-probe unshare --uts --mount --ipc --propagation private \
      sh -c 'hostname zero-probe && mount -t tmpfs zero-shm /dev/shm' 2>/dev/null ||
      { echo "cluster.sh: cannot make UTS, mount and IPC namespaces (unshare)"; ok=0; }
  fi
  ip netns del zero-probe 2>/dev/null || true
  [ "$ok" = 1 ]
}

has_netem() {
  ip link add zero-probe0 type veth peer name zero-probe1 2>/dev/null || return 1
  local rc=0
  tc qdisc add dev zero-probe0 root netem delay 1ms 2>/dev/null || rc=1
  ip link del zero-probe0 2>/dev/null || true
  return "$rc"
}

down() {
  local pidfile
  for pidfile in "$dir"/node*.pid; do
    [ -f "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
  local ns
  for ns in $(ip netns list 2>/dev/null | awk -v p="^$prefix-node[0-9]+$" '$1 ~ p {print $1}'); do
    # Any rank still running in a node ends with it.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E "^$prefix-v[0-9]+" | cut -d@ -f1); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -f "$dir/hostfile" "$dir/hostfile.mca" "$dir/hostfile.mca.args" "$dir/node-shell"
}

# tc on one interface (run inside a namespace with `in NS`): the rate, and the delay if asked.
shape() {  # DEVICE [ip netns exec NS]
  local device="$1"; shift
  [ -n "$rate$delay" ] || return 0
  if [ -n "$delay" ]; then
    "$@" tc qdisc add dev "$device" root netem delay "$delay" ${rate:+rate "$rate"}
  else
    # A burst of 1 ms at the rate (at least 64 KiB, one segmentation-offloaded packet), a
    # queue of at most 20 ms: a link, not a buffer.
    "$@" tc qdisc add dev "$device" root tbf rate "$rate" burst 1mbit latency 20ms
  fi
}

up() {
  check >/dev/null || { check; exit 3; }
  if [ -n "$delay" ] && ! has_netem; then
    echo "cluster.sh: --delay needs tc netem, which this kernel lacks (sch_netem); --rate works without it" >&2
    exit 3
  fi
  down
  mkdir -p "$dir"
  local abs_dir slots
  abs_dir="$(cd "$dir" && pwd)"
  slots="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$dir/hostfile"
  local k
  for k in $(seq "$nodes"); do
    local ns="$prefix-node$k" outside="$prefix-v$k" inside="$prefix-p$k"
    ip netns add "$ns"
    ip link add "$outside" type veth peer name "$inside"
    ip link set "$inside" netns "$ns"
    ip link set "$outside" master "$bridge" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$subnet.$k/24" dev "$inside"
    ip netns exec "$ns" ip link set "$inside" up
    shape "$outside"                        # towards the node
    shape "$inside" ip netns exec "$ns"     # from the node
    # The node's holder: its UTS, mount and IPC namespaces live as long as it does.
    setsid ip netns exec "$ns" unshare --uts --mount --ipc --propagation private sh -c \
      "hostname node$k && mount -t tmpfs -o mode=1777 zero-shm /dev/shm && echo \$\$ >'$abs_dir/node$k.pid' && exec sleep infinity" \
      </dev/null >/dev/null 2>&1 &
    echo "node$k slots=$slots" >>"$dir/hostfile"
  done
  for k in $(seq "$nodes"); do
    local waited=0
    until [ -s "$dir/node$k.pid" ]; do
      sleep 0.1; waited=$((waited + 1))
      [ "$waited" -lt 100 ] || { echo "cluster.sh: node$k did not start" >&2; down; exit 1; }
    done
  done
  cat >"$dir/node-shell" <<EOF
#!/bin/sh
# Open MPI's remote agent for the nodes of scripts/cluster.sh: "node-shell NODE COMMAND..."
# runs the command in NODE's namespaces, as ssh would run it on a host.
node="\$1"; shift
pidfile="$abs_dir/\$node.pid"
[ -f "\$pidfile" ] || { echo "node-shell: no node '\$node' (scripts/cluster.sh up)" >&2; exit 255; }
exec nsenter -t "\$(cat "\$pidfile")" --net --uts --mount --ipc -- /bin/sh -c "\$*"
EOF
  chmod +x "$dir/node-shell"
  cat >"$dir/hostfile.mca" <<EOF
plm_rsh_agent = $abs_dir/node-shell
plm_rsh_no_tree_spawn = 1
oob_tcp_if_include = $subnet.0/24
btl_tcp_if_include = $subnet.0/24
btl = self,vader,tcp
oob_tcp_keepalive_time = 5
oob_tcp_keepalive_intvl = 1
oob_tcp_keepalive_probes = 5
EOF
  sed 's/^\([a-z_]*\) = \(.*\)$/--mca \1 \2/' "$dir/hostfile.mca" >"$dir/hostfile.mca.args"
  echo "cluster.sh: $nodes node(s), $slots slots each${rate:+, $rate}${delay:+, $delay one way}: $dir/hostfile"
}

case "$action" in
  up) up ;;
  down) down; echo "cluster.sh: down" ;;
  check) check && echo "cluster.sh: this machine can make a cluster$(has_netem || echo ' (without --delay: no tc netem)')" ;;
  *) echo "usage: scripts/cluster.sh up N [--rate R] [--delay D] [--dir DIR] | down [--dir DIR] | check" >&2; exit 2 ;;
esac
