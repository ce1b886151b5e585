#!/usr/bin/env bash
# A small cluster of "hosts" on this machine, for multi-node tests and experiments: each host
# is a network namespace with its own UTS namespace (its own hostname), a veth link to a
# bridge of its own cluster and its own address on a private subnet. Open MPI starts ranks on
# the hosts through rsh_agent.sh (next to this script), which enters a host's namespaces to
# run the orted there, so ranks on different hosts talk over TCP through the bridge and ranks
# on one host over shared memory, as on a real cluster (docs/OPERATIONS.md, "Several hosts").
# Requires root, iproute2 (ip, tc), util-linux (unshare, nsenter).
#
#   cluster.sh up N [NAME]          create N hosts (1-8); prints NAME (default: cmn<random>)
#   cluster.sh down NAME            remove the cluster: its processes, namespaces, links
#   cluster.sh clean-stale          remove clusters whose owner process has ended
#   cluster.sh hosts NAME           "index hostname address" per host
#   cluster.sh hostfile NAME SLOTS  path of an Open MPI hostfile, SLOTS ranks per host
#   cluster.sh exec NAME K cmd...   run a command on host K (1-based) in its namespaces
#   cluster.sh mpirun NAME SLOTS [mpirun args...]
#                                   mpirun on host 1 with the cluster's hostfile (SLOTS per
#                                   host), the rsh agent, TCP restricted to the cluster's
#                                   subnet and Open MPI's keepalive tuned (MPIRUN_MCA below);
#                                   MN_HOSTS="2 3" limits the job to those hosts (mpirun on
#                                   the first)
#   cluster.sh kill-host NAME K [SIGNAL]   signal every process on host K (a node crash:
#                                   KILL, the default, ends its orted and ranks)
#   cluster.sh link NAME K down|up|block|unblock|loss PCT|shape RATE [DELAY]|clear
#                                   host K's link: down/up (the switch port's carrier),
#                                   block/unblock (the bridge drops every packet of the host,
#                                   links stay up: a silent cut), loss (netem, both
#                                   directions), shape (tbf at RATE on both ends, e.g. 10gbit,
#                                   with a netem delay such as 20us), clear (no qdisc).
#                                   loss and a delay need netem (CONFIG_NET_SCH_NETEM).
#   cluster.sh pids NAME K          pids of the processes on host K
#
# Names: a cluster NAME is "cmn" + 1-8 lowercase letters or digits; its namespaces are
# NAME-h1..NAME-hN, its bridge NAMEbr, its veths NAMEv1..; its hosts are called NAME-n1 ...
# (hostnames must differ between concurrent clusters: Open MPI's session directories in the
# shared /tmp are named after the host). The state lives in /run/colonnade-mn/NAME, with the
# owner's pid: `up` first removes clusters of dead owners (a test killed before its trap).
# The subnet 10.213.0.0/24 exists only inside each cluster's namespaces (no address in the
# machine's own namespace), so concurrent clusters do not collide.
#
# Exit codes: 0 ok, 1 error, 2 usage, 77 namespaces cannot be created here (not root, no ip,
# no unshare/nsenter: the tests turn that into a skip, or a failure under COLONNADE_NO_SKIP=1).
set -uo pipefail

STATE_ROOT=${COLONNADE_MN_STATE_ROOT:-/run/colonnade-mn}
SUBNET=10.213.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
AGENT=$HERE/rsh_agent.sh

# Open MPI settings every multi-node launch here uses (docs/OPERATIONS.md, "When a rank
# stops answering", explains them for real clusters):
#   * TCP only on the cluster's network;
#   * keepalive on the runtime's own connections (mpirun <-> orted): an idle connection to a
#     host whose link is cut is found dead 15 to 35 s after the cut (the next probe comes
#     within KEEPALIVE_S = 20 s, then 5 probes 3 s apart) instead of up to 300 + 9 x 20 = 480 s
#     (Open MPI's default); its lower bound (15 s)
#     stays above the tests' --collective_timeout=10, so the trainer's watchdog names the
#     silent rank first. Environment variables, so that an explicit --mca overrides them.
# And on every host (cmd_up): net.ipv4.tcp_retries2=5 (TCP_RETRIES2), so that mpirun's abort,
# whose kill messages to a cut-off host's orted sit unacknowledged (keepalive is off while
# data is outstanding), gives up after about 13 s instead of the default 15 retries (~15 min).
# And mpi_yield_when_idle (MN_YIELD): the hosts share this machine's cores, so a rank that
# busy-polls for a message takes a core from the rank that would send it; without yielding,
# one cross-host message took ~5 ms here (a scheduler slice) instead of ~13 us.
# btl_tcp_links (MN_TCP_LINKS): two TCP connections per pair of ranks; with Open MPI's one,
# traffic in both directions at once got about half a shaped link's rate per direction
# (58-68 of 118 MB/s at 1 Gbit/s; the blocking MPI_Allreduce 1.3 s for 93 MB), with two the
# whole (111-120 MB/s each way, 0.82 s).
# MN_IALLREDUCE: the algorithm of the non-blocking all-reduce the gradient buckets use
# (coll_libnbc_iallreduce_algorithm: 1 ring, 3 rabenseifner; unset: Open MPI's choice, which
# for two ranks is binomial, a reduce then a broadcast that moves the data twice: 1.73 s for
# 93 MB at 1 Gbit/s against 0.84 s with the ring).
MPIRUN_MCA=(--mca btl "tcp,vader,self" --mca mpi_yield_when_idle "${MN_YIELD:-1}"
            --mca btl_tcp_links "${MN_TCP_LINKS:-2}"
            ${MN_IALLREDUCE:+--mca coll_libnbc_iallreduce_algorithm "$MN_IALLREDUCE"}
            --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24"
            --mca plm_rsh_no_tree_spawn 1)
export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-${KEEPALIVE_S:-20}}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-3}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-5}

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_tools() {
  if [ "$(id -u)" != 0 ]; then echo "cluster.sh: needs root to create namespaces" >&2; exit 77; fi
  local t
  for t in ip tc unshare nsenter; do
    command -v "$t" >/dev/null || { echo "cluster.sh: '$t' is not installed" >&2; exit 77; }
  done
}

valid_name() { [[ "$1" =~ ^cmn[0-9a-z]{1,8}$ ]] || die "bad cluster name '$1' (cmn + 1-8 of [0-9a-z])"; }
state_dir() { echo "$STATE_ROOT/$1"; }
ns_of() { echo "$1-h$2"; }
uts_of() { echo "$(state_dir "$1")/uts-h$2"; }
addr_of() { echo "$SUBNET.$2"; }
host_of() { echo "$1-n$2"; }

# Runs a command inside host K's network and UTS namespaces.
on_host() {
  local name=$1 k=$2; shift 2
  nsenter --net="/run/netns/$(ns_of "$name" "$k")" --uts="$(uts_of "$name" "$k")" -- "$@"
}

cmd_down() {
  local name=$1 dir k pids
  valid_name "$name"
  dir=$(state_dir "$name")
  # Processes first (orteds and ranks would otherwise keep a namespace alive), then links.
  for k in 1 2 3 4 5 6 7 8; do
    ip netns pids "$(ns_of "$name" "$k")" >/dev/null 2>&1 || continue
    for _ in 1 2 3; do
      pids=$(ip netns pids "$(ns_of "$name" "$k")" 2>/dev/null)
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086  # a list of pids
      kill -KILL $pids 2>/dev/null
      sleep 0.2
    done
    ip link del "${name}v$k" 2>/dev/null
    ip netns del "$(ns_of "$name" "$k")" 2>/dev/null
  done
  ip link del "${name}br" 2>/dev/null
  if [ -d "$dir" ]; then
    for f in "$dir"/uts-h*; do
      [ -e "$f" ] || continue
      umount "$f" 2>/dev/null
      rm -f "$f"
    done
    rm -rf "$dir"
  fi
  return 0
}

cmd_clean_stale() {
  local d name owner
  for d in "$STATE_ROOT"/cmn*; do
    [ -d "$d" ] || continue
    name=$(basename "$d")
    owner=$(cat "$d/owner" 2>/dev/null || echo 0)
    if [ "$owner" = 0 ] || ! kill -0 "$owner" 2>/dev/null; then
      echo "cluster.sh: removing stale cluster $name (owner $owner has ended)" >&2
      cmd_down "$name"
    fi
  done
  # Namespaces or links of our prefix without a state directory (a crash during `up`).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^cmn[0-9a-z]+-h[0-9]+$'); do
    name=${ns%-h*}
    [ -d "$(state_dir "$name")" ] || { ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL; ip netns del "$ns"; }
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^cmn[0-9a-z]+(br|v[0-9]+)$'); do
    name=$(echo "$l" | sed -E 's/(br|v[0-9]+)$//')
    [ -d "$(state_dir "$name")" ] || ip link del "$l" 2>/dev/null
  done
  return 0
}

cmd_up() {
  local n=$1 name=${2:-} owner=${COLONNADE_MN_OWNER:-$PPID} dir k ns veth
  [[ "$n" =~ ^[1-8]$ ]] || die "up: N must be 1-8, not '$n'"
  check_tools
  cmd_clean_stale
  [ -n "$name" ] || name=cmn$(printf '%05x' $(( (RANDOM << 8 ^ $$) & 0xfffff )))
  valid_name "$name"
  dir=$(state_dir "$name")
  [ -e "$dir" ] && die "cluster $name exists"
  mkdir -p "$dir" || die "cannot create $dir"
  echo "$owner" >"$dir/owner"
  echo "$n" >"$dir/n"
  # On failure part-way, remove what was made.
  trap 'cmd_down "$name"' ERR
  set -E
  ip link add "${name}br" type bridge || { cmd_down "$name"; exit 77; }
  ip link set "${name}br" up
  for k in $(seq 1 "$n"); do
    ns=$(ns_of "$name" "$k")
    veth=${name}v$k
    ip netns add "$ns" || { cmd_down "$name"; die "ip netns add $ns failed"; }
    touch "$(uts_of "$name" "$k")"
    unshare --uts="$(uts_of "$name" "$k")" hostname "$(host_of "$name" "$k")" ||
      { cmd_down "$name"; die "unshare --uts failed"; }
    ip link add "$veth" type veth peer name "${veth}p" netns "$ns"
    ip link set "$veth" master "${name}br" up
    ip -n "$ns" link set "${veth}p" name eth0
    # IPv4 only: Open MPI would also list eth0's IPv6 link-local address.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2="${TCP_RETRIES2:-5}" ||
      { cmd_down "$name"; die "cannot set net.ipv4.tcp_retries2 in $ns"; }
    ip -n "$ns" addr add "$(addr_of "$name" "$k")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "$k $(host_of "$name" "$k") $(addr_of "$name" "$k")" >>"$dir/hosts"
  done
  trap - ERR
  # The bridge learns and forwards once every port is up; wait until host 1 reaches the last
  # (a UDP round trip through python, as no ping may be installed).
  if [ "$n" -gt 1 ] && ! wait_reachable "$name" 1 "$n"; then
    cmd_down "$name"
    die "host 1 cannot reach host $n over the bridge (a bridge firewall, br_netfilter?)"
  fi
  echo "$name"
}

# wait_reachable NAME FROM TO: a TCP connection from host FROM to a listener on host TO.
wait_reachable() {
  local name=$1 from=$2 to=$3
  on_host "$name" "$to" python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", 7999)); s.listen(1); s.settimeout(10)
try:
    c, _ = s.accept(); c.close()
except OSError:
    sys.exit(1)' &
  local listener=$!
  for _ in $(seq 1 50); do
    if on_host "$name" "$from" python3 -c '
import socket, sys
socket.create_connection(("'"$(addr_of "$name" "$to")"'", 7999), timeout=0.5).close()' 2>/dev/null; then
      wait "$listener" 2>/dev/null
      return 0
    fi
    sleep 0.2
  done
  kill "$listener" 2>/dev/null; wait "$listener" 2>/dev/null
  return 1
}

# The hostfile of the hosts in $MN_HOSTS (space-separated indices; default: all).
cmd_hostfile() {
  local name=$1 slots=$2 dir f
  dir=$(state_dir "$name")
  [ -f "$dir/hosts" ] || die "no cluster '$name'"
  f=$dir/hostfile-$slots-$(echo "${MN_HOSTS:-all}" | tr ' ' '_')
  awk -v s="$slots" -v pick=" ${MN_HOSTS:-} " \
    'pick == "  " || index(pick, " " $1 " ") {print $3 " slots=" s}' "$dir/hosts" >"$f"
  [ -s "$f" ] || die "no host of '$name' in MN_HOSTS='${MN_HOSTS:-}'"
  echo "$f"
}

cmd_mpirun() {
  local name=$1 slots=$2; shift 2
  local hostfile
  hostfile=$(cmd_hostfile "$name" "$slots") || exit 1
  # mpirun runs on the first host of the list, as under a batch system (the first node of
  # the allocation).
  local first
  first=$(echo "${MN_HOSTS:-1}" | awk '{print $1}')
  COLONNADE_MN_CLUSTER=$(state_dir "$name") on_host "$name" "$first" \
    mpirun --allow-run-as-root --hostfile "$hostfile" --mca plm_rsh_agent "$AGENT" \
    "${MPIRUN_MCA[@]}" -x COLONNADE_MN_CLUSTER "$@"
}

# Whether this kernel has netem (CONFIG_NET_SCH_NETEM): delay and random loss need it.
have_netem() {
  local name=$1 ns
  ns=$(ns_of "$name" 1)
  if ip netns exec "$ns" tc qdisc add dev lo root netem delay 1us 2>/dev/null; then
    ip netns exec "$ns" tc qdisc del dev lo root 2>/dev/null
    return 0
  fi
  return 1
}

cmd_link() {
  local name=$1 k=$2 what=$3; shift 3
  local veth=${name}v$k ns
  ns=$(ns_of "$name" "$k")
  case $what in
  down) ip link set "$veth" down ;;  # the switch port loses carrier: the host sees NO-CARRIER
  up) ip link set "$veth" up ;;
  # The bridge stops forwarding to and from the host while both links stay up: every packet
  # is lost silently, as with a failed switch or a cable cut behind a media converter.
  block) bridge link set dev "$veth" state 0 ;;
  unblock) bridge link set dev "$veth" state 3 ;;
  clear)
    tc qdisc del dev "$veth" root 2>/dev/null
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null
    return 0 ;;
  loss)
    local pct=${1:?loss needs a percentage}
    have_netem "$name" || die "link loss needs netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); use 'block' for 100% loss"
    tc qdisc replace dev "$veth" root netem loss "$pct%"
    ip netns exec "$ns" tc qdisc replace dev eth0 root netem loss "$pct%" ;;
  shape)
    # RATE with tbf on both ends of the link (each direction is shaped by its sender's side),
    # under a netem delay of DELAY one way when given (needs netem).
    local rate=${1:?shape needs a rate (e.g. 10gbit)} delay=${2:-} dev
    if [ -n "$delay" ] && [ "$delay" != 0 ] && ! have_netem "$name"; then
      die "link shape with a delay needs netem, which this kernel lacks (CONFIG_NET_SCH_NETEM)"
    fi
    for dev in "$veth" "ns:eth0"; do
      local tcx=(tc)
      if [ "$dev" = ns:eth0 ]; then tcx=(ip netns exec "$ns" tc); dev=eth0; fi
      "${tcx[@]}" qdisc del dev "$dev" root 2>/dev/null
      if [ -n "$delay" ] && [ "$delay" != 0 ]; then
        "${tcx[@]}" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 || return 1
        "${tcx[@]}" qdisc add dev "$dev" parent 1: handle 2: tbf rate "$rate" \
          burst "$(burst_for "$rate")" latency 50ms || return 1
      else
        "${tcx[@]}" qdisc add dev "$dev" root handle 1: tbf rate "$rate" \
          burst "$(burst_for "$rate")" latency 50ms || return 1
      fi
    done ;;
  *) die "link: down, up, block, unblock, loss PCT, shape RATE [DELAY] or clear" ;;
  esac
}

# Bytes of burst for tbf at RATE (a tc rate such as 10gbit or 1gbit): rate x 1 ms, at least
# 64 KiB (TSO/GSO segments of veth are up to 64 KiB); a larger burst lets messages of a few
# MB through faster than RATE.
burst_for() {
  python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print(max(65536, int(bits / 8 * 0.001)))' "$1"
}

cmd_kill_host() {
  local name=$1 k=$2 sig=${3:-KILL} pids
  pids=$(ip netns pids "$(ns_of "$name" "$k")")
  # shellcheck disable=SC2086  # a list of pids
  [ -n "$pids" ] && kill -"$sig" $pids
  return 0
}

# The whole command line is read before anything runs (a function, called on the last
# line), so editing this file while a long `cluster.sh mpirun` runs cannot derail it.
main() {
  [ $# -ge 1 ] || usage
  cmd=$1; shift
  case $cmd in
  up) [ $# -ge 1 ] || usage; cmd_up "$@" ;;
  down) [ $# -ge 1 ] || usage; check_tools; cmd_down "$1" ;;
  clean-stale) check_tools; cmd_clean_stale ;;
  hosts) [ $# -ge 1 ] || usage; cat "$(state_dir "$1")/hosts" ;;
  hostfile) [ $# -ge 2 ] || usage; cmd_hostfile "$1" "$2" ;;
  exec) [ $# -ge 3 ] || usage; n=$1; k=$2; shift 2; on_host "$n" "$k" "$@" ;;
  mpirun) [ $# -ge 2 ] || usage; cmd_mpirun "$@" ;;
  kill-host) [ $# -ge 2 ] || usage; cmd_kill_host "$@" ;;
  link) [ $# -ge 3 ] || usage; cmd_link "$@" ;;
  pids) [ $# -ge 2 ] || usage; ip netns pids "$(ns_of "$1" "$2")" ;;
  *) usage ;;
  esac
}
main "$@"; exit $?
