#!/usr/bin/env bash
# Hosts on one machine, for multi-host tests and benchmarks. Each host h<i> is
#   - a network namespace troupe-h<i> whose eth0 (10.78.0.<10+i>/24) is a veth on the private
#     bridge troupe0 (10.78.0.1/24 in the root namespace); no forwarding, no NAT: the only
#     addresses reachable are the ones this script creates, and loopback;
#   - a mount namespace with its own tmpfs /dev/shm and /tmp (shared-memory rings and beacons of
#     one host are invisible to the others) and an /etc/hosts naming every host (h<i>) and the
#     bridge's address (troupe-root), and a UTS namespace with hostname h<i>.
# The mount and UTS namespaces are kept alive as bind mounts under $TROUPE_HOSTS_RUN (no holder
# process). Root is needed.
#
#   hosts.sh up N                  make hosts h1..hN (idempotent; adds hosts missing from a smaller set)
#   hosts.sh down                  kill every process in the hosts, remove hosts and bridge
#   hosts.sh list                  host, address, processes
#   hosts.sh exec HOST CMD...      run CMD inside HOST (net + mount + UTS namespaces)
#   hosts.sh addr HOST             the host's address
#   hosts.sh pids HOST             pids of the processes inside HOST
#   hosts.sh kill HOST [SIG]       signal every process inside HOST (default KILL): a host dies
#   hosts.sh cut HOST | heal HOST  take the host's link down / up (a partition)
#   hosts.sh limit HOST RATE       shape the host's egress with tc tbf (RATE like 1gbit, 10gbit);
#                                  `hosts.sh limit HOST off` removes it
# Environment: TROUPE_HOSTS_RUN (default /run/troupe-hosts).
set -euo pipefail

BR=troupe0
NET=10.78.0
BR_IP=$NET.1
RUN=${TROUPE_HOSTS_RUN:-/run/troupe-hosts}
PREFIX=troupe-h
# Directories under /tmp that every host still sees (bind-mounted into its private /tmp at the same
# path): the repository this script belongs to (a checkout or build under /tmp must stay
# reachable), plus TROUPE_HOSTS_SHARE (colon-separated).
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "hosts.sh: $*" >&2; exit 1; }
need_root() { [[ $(id -u) -eq 0 ]] || die "needs root (network and mount namespaces)"; }
host_index() { [[ "$1" =~ ^h([0-9]+)$ ]] || die "unknown host '$1' (hosts are named h1, h2, ...)"; echo "${BASH_REMATCH[1]}"; }
host_exists() { [[ -e "$RUN/$1/mnt" ]] && ip netns list | grep -qw "$PREFIX${1#h}"; }
need_host() { host_index "$1" >/dev/null; host_exists "$1" || die "no host '$1' (run: hosts.sh up N)"; }
veth() { echo "trh${1#h}"; }  # root-side end of the host's veth

# The namespace files live in a private mount so the bind mounts do not propagate (needed for
# persistent mount namespaces).
prepare_run() {
  mkdir -p "$RUN"
  if ! mountpoint -q "$RUN"; then
    mount --bind "$RUN" "$RUN"
  fi
  mount --make-private "$RUN"
}

make_bridge() {
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge
    ip addr add "$BR_IP/24" dev "$BR"
  fi
  ip link set "$BR" up
}

# The shell commands that give a host its private /tmp and keep the shared directories under /tmp
# visible: each is bind-mounted aside first, then back at its path on the new tmpfs.
tmp_mounts() {
  local h=$1 i=0 d cmds="" keep=""
  local IFS=:
  for d in $REPO ${TROUPE_HOSTS_SHARE:-}; do
    [[ "$d" == /tmp/* && -d "$d" ]] || continue
    mkdir -p "$RUN/$h/keep$i"
    cmds+="mount --bind '$d' '$RUN/$h/keep$i' && "
    keep+=" && mkdir -p '$d' && mount --bind '$RUN/$h/keep$i' '$d'"
    i=$((i + 1))
  done
  echo "${cmds}mount -t tmpfs -o mode=1777 tmpfs /tmp$keep"
}

make_host() {
  local h=$1 i ns v
  i=$(host_index "$h")
  ns=$PREFIX$i
  v=$(veth "$h")
  ip netns list | grep -qw "$ns" || ip netns add "$ns"
  # The host's own end is what tells: a root-side end without it is a stale pair whose namespace a
  # dying process still held as `down` removed it (the new namespace had no eth0: "Network is
  # unreachable" for every node of that host).
  if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
    ip link del "$v" 2>/dev/null || true
    ip link add "$v" type veth peer name eth0 netns "$ns"
    ip link set "$v" master "$BR" up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  fi
  if [[ ! -e "$RUN/$h/mnt" ]]; then
    # One /etc/hosts for every host, bind-mounted: write_hosts_file rewrites it in place.
    mkdir -p "$RUN/$h"
    touch "$RUN/$h/mnt" "$RUN/$h/uts"
    # The new mount namespace gets private tmpfs /dev/shm and /tmp and the hostname; both
    # namespaces outlive this command through the bind mounts unshare makes of them.
    nsenter --net="/run/netns/$ns" unshare --mount="$RUN/$h/mnt" --uts="$RUN/$h/uts" --propagation private \
      sh -c "hostname $h && mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm && $(tmp_mounts "$h") \\
             && mount --bind $RUN/etc-hosts /etc/hosts"
  else
    missing_shares "$h"
  fi
}

# A host made before (by another checkout, or without TROUPE_HOSTS_SHARE then) keeps the view of /tmp
# it was made with: a directory under /tmp this call would share is not there. Said, with the way
# out (it said "N hosts up", and jobs found no binary there).
missing_shares() {
  local h=$1 d
  local IFS=:
  for d in $REPO ${TROUPE_HOSTS_SHARE:-}; do
    [[ "$d" == /tmp/* && -d "$d" ]] || continue
    nsenter --mount="$RUN/$h/mnt" test -d "$d" && continue
    echo "hosts.sh: warning: $h was made before without $d (another checkout, or another TROUPE_HOSTS_SHARE):" \
      "it does not see it; 'hosts.sh down' then 'up' makes the hosts again" >&2
  done
}

run_in() {  # run_in HOST CMD...
  local h=$1; shift
  need_host "$h"
  exec nsenter --net="/run/netns/$PREFIX${h#h}" --mount="$RUN/$h/mnt" --uts="$RUN/$h/uts" -- "$@"
}

host_pids() { ip netns pids "$PREFIX${1#h}" 2>/dev/null || true; }

hosts_present() {
  ip netns list 2>/dev/null | awk -v p="^$PREFIX[0-9]+\$" '$1 ~ p {sub("'"$PREFIX"'", "h", $1); print $1}' | sort -V
}

# Every host's /etc/hosts (the same inode in all: truncated and rewritten, never replaced).
write_hosts_file() {
  local n=$1 i
  {
    echo "127.0.0.1 localhost"
    echo "$BR_IP troupe-root"
    for i in $(seq 1 "$n"); do echo "$NET.$((10 + i)) h$i"; done
  } > "$RUN/etc-hosts"
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up: N must be a number from 1 to 200, got '${n}'"
  need_root
  prepare_run
  make_bridge
  local have
  have=$(hosts_present | wc -l)
  write_hosts_file $((n > have ? n : have))
  for i in $(seq 1 "$n"); do make_host "h$i"; done
  echo "hosts.sh: $n hosts up on $BR ($BR_IP/24)"
}

cmd_down() {
  need_root
  local h
  for h in $(hosts_present); do
    local pids
    pids=$(host_pids "$h" | tr '\n' ' ')
    [[ -n "${pids// /}" ]] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$PREFIX${h#h}" 2>/dev/null || true
    # Its veth pair goes now, not when the last killed process is gone (that held the namespace).
    ip link del "$(veth "$h")" 2>/dev/null || true
  done
  if [[ -d "$RUN" ]]; then
    for d in "$RUN"/h*; do
      [[ -d "$d" ]] || continue
      umount "$d/mnt" "$d/uts" 2>/dev/null || true
      rm -rf "$d"
    done
    rm -f "$RUN/etc-hosts"
    umount "$RUN" 2>/dev/null || true
  fi
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  echo "hosts.sh: down"
}

cmd_list() {
  local h
  for h in $(hosts_present); do
    printf '%s %s pids: %s\n' "$h" "$NET.$((10 + ${h#h}))" "$(host_pids "$h" | tr '\n' ' ')"
  done
}

cmd_limit() {
  local h=$1 rate=${2:-}
  need_host "$h"
  local v
  v=$(veth "$h")
  # Shape both directions: the host's egress (eth0 inside) and its ingress (the root-side veth).
  if [[ "$rate" == off ]]; then
    ip netns exec "$PREFIX${h#h}" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "$v" root 2>/dev/null || true
    return
  fi
  [[ "$rate" =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "limit: RATE must look like 100mbit, 1gbit or 10gbit, got '$rate'"
  # burst: at least rate/HZ plus one maximum-size packet; 1 MB holds 10 Gbit/s at HZ=1000.
  ip netns exec "$PREFIX${h#h}" tc qdisc replace dev eth0 root tbf rate "$rate" burst 1mb latency 50ms
  tc qdisc replace dev "$v" root tbf rate "$rate" burst 1mb latency 50ms
}

main() {
  local cmd=${1:-}
  shift || true
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    list) cmd_list ;;
    exec) [[ $# -ge 2 ]] || die "exec: usage: hosts.sh exec HOST CMD..."; need_root; run_in "$@" ;;
    addr)  # a host that is up (it printed an address for any hN, and failed half-way on a bad name)
      [[ $# -eq 1 ]] || die "addr: usage: hosts.sh addr HOST"
      need_host "$1"
      echo "$NET.$((10 + $(host_index "$1")))" ;;
    pids) [[ $# -eq 1 ]] || die "pids: usage: hosts.sh pids HOST"; need_host "$1"; host_pids "$1" ;;
    kill)
      [[ $# -ge 1 ]] || die "kill: usage: hosts.sh kill HOST [SIG]"
      need_root; need_host "$1"
      local pids
      pids=$(host_pids "$1" | tr '\n' ' ')
      [[ -n "${pids// /}" ]] && kill -"${2:-KILL}" $pids 2>/dev/null || true ;;
    cut) [[ $# -eq 1 ]] || die "cut: usage: hosts.sh cut HOST"; need_root; need_host "$1"; ip link set "$(veth "$1")" down ;;
    heal) [[ $# -eq 1 ]] || die "heal: usage: hosts.sh heal HOST"; need_root; need_host "$1"; ip link set "$(veth "$1")" up ;;
    limit) [[ $# -eq 2 ]] || die "limit: usage: hosts.sh limit HOST RATE|off"; need_root; cmd_limit "$@" ;;
    ""|-h|--help|help) sed -n '2,22p' "$0" ;;
    *) die "unknown command '$cmd' (see hosts.sh --help)" ;;
  esac
}

main "$@"
