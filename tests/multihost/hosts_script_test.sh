#!/usr/bin/env bash
# scripts/hosts.sh makes real hosts: two namespaces reach each other over TCP on their own
# addresses, have their own hostname, /dev/shm and /tmp; a cut link stops traffic and a healed one
# lets it through again; a tbf limit is installed; `kill` ends every process of a host; `down`
# leaves nothing behind. Exit 77 (ctest: skipped) without root, saying why.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
S="$here/scripts/hosts.sh"
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: hosts.sh needs root (network and mount namespaces)"; exit 77; fi
py=/usr/bin/python3
fail() { echo "FAIL: $*"; "$S" down >/dev/null 2>&1; exit 1; }
trap '"$S" down >/dev/null 2>&1' EXIT

"$S" up 2 || fail "up 2"
[[ $("$S" exec h1 hostname) == h1 ]] || fail "h1's hostname"
[[ $("$S" addr h2) == 10.78.0.12 ]] || fail "h2's address"
"$S" addr h9 2> /dev/null && fail "an address for h9, a host that is not up"
[[ $("$S" addr hx 2>&1) == *"unknown host 'hx'"* ]] || fail "addr of a bad name"
[[ $("$S" exec h1 getent hosts h2) == 10.78.0.12* ]] || fail "h1 does not resolve h2"
"$S" exec h2 sh -c 'echo x > /dev/shm/troupe_hosts_test && echo y > /tmp/troupe_hosts_test' || fail "write in h2"
[[ -e /dev/shm/troupe_hosts_test ]] && fail "h2's /dev/shm is the machine's"
"$S" exec h1 test -e /dev/shm/troupe_hosts_test && fail "h1 sees h2's /dev/shm"
"$S" exec h1 test -e /tmp/troupe_hosts_test && fail "h1 sees h2's /tmp"
# up again over existing hosts with a share they were not made with: said (it said "2 hosts up").
late=$(mktemp -d /tmp/troupe-hosts-late-XXXXXX)
TROUPE_HOSTS_SHARE=$late "$S" up 2 2> /tmp/hosts_test_up.err || fail "up 2 again"
rmdir "$late"
grep -q "h1 was made before without $late" /tmp/hosts_test_up.err || fail "no warning: $(cat /tmp/hosts_test_up.err)"

server='import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.78.0.12", 7011)); s.listen(); print("listening", flush=True)
for _ in range(2):
    c, a = s.accept(); c.sendall(a[0].encode()); c.close()'
client='import socket,sys
try:
    c = socket.create_connection(("10.78.0.12", 7011), timeout=float(sys.argv[1])); print(c.recv(64).decode())
except OSError as e:
    print("error", e)'
"$S" exec h2 "$py" -c "$server" > /tmp/hosts_test_server.out &
for _ in $(seq 1 100); do grep -q listening /tmp/hosts_test_server.out 2>/dev/null && break; sleep 0.05; done
[[ $("$S" exec h1 "$py" -c "$client" 5) == 10.78.0.11 ]] || fail "h1 -> h2 TCP (the server must see h1's address)"
"$S" cut h2
[[ $("$S" exec h1 "$py" -c "$client" 1) == error* ]] || fail "a cut host is still reachable"
"$S" heal h2
[[ $("$S" exec h1 "$py" -c "$client" 5) == 10.78.0.11 ]] || fail "a healed host is not reachable"
wait

"$S" limit h1 1gbit || fail "limit"
"$S" exec h1 tc qdisc show dev eth0 | grep -q 'tbf.*rate 1Gbit' || fail "no tbf qdisc on h1"
"$S" limit h1 off
"$S" exec h1 sleep 300 &
for _ in $(seq 1 100); do [[ -n $("$S" pids h1) ]] && break; sleep 0.05; done
[[ -n $("$S" pids h1) ]] || fail "no process in h1"
"$S" kill h1
wait
[[ -z $("$S" pids h1) ]] || fail "processes left in h1 after kill"

# A namespace that a process still holds as it is removed keeps its veth pair: `up` right after
# made a new h1 without eth0 ("Network is unreachable" for every node of it: a red CI run).
nsenter --net=/run/netns/troupe-h1 sleep 300 &
holder=$!
sleep 0.2
ip netns del troupe-h1
ip link show trh1 >/dev/null 2>&1 || fail "the removed namespace's veth went at once (nothing to test)"
"$S" up 2 >/dev/null || fail "up over a stale veth"
"$S" exec h1 ip -4 addr show dev eth0 2>/dev/null | grep -q 10.78.0.11 || fail "h1 made again without its address"
"$S" exec h2 "$py" -c "$server" > /tmp/hosts_test_server.out &
for _ in $(seq 1 100); do grep -q listening /tmp/hosts_test_server.out 2>/dev/null && break; sleep 0.05; done
[[ $("$S" exec h1 "$py" -c "$client" 5) == 10.78.0.11 ]] || fail "h1 made again does not reach h2"
kill "$holder" 2>/dev/null
"$S" kill h2
wait

"$S" down >/dev/null || fail "down"
ip link show troupe0 >/dev/null 2>&1 && fail "bridge left after down"
ip netns list | grep -q troupe-h && fail "namespaces left after down"
trap - EXIT
echo "hosts_script_test: ok"
