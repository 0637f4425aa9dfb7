#!/usr/bin/env bash
# TCP ring links across hosts (scripts/hosts.sh): a 3-host ring allreduces correctly; a host cut
# off mid-collective fails its neighbours within the heartbeat timeout (not TCP's minutes); a
# host whose processes are SIGKILLed fails them at once. Usage: tcp_ring_test.sh RANK_BINARY.
# Exit 77 (ctest: skipped) without root, saying why.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
S="$here/scripts/hosts.sh"
B=$(realpath "$1")
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: hosts.sh needs root (network and mount namespaces)"; exit 77; fi
out=$(mktemp -d)
fail() { echo "FAIL: $*"; for f in "$out"/*; do echo "== $f"; cat "$f"; done; exit 1; }
trap '"$S" down > /dev/null 2>&1; rm -rf "$out"' EXIT
"$S" up 3 > /dev/null || fail "hosts up"

ring() {  # ring SIZE PORT ARGS...: starts rank r on host h(r+1), output in $out/rank<r>.{out,err}
  local size=$1 port=$2 r h nx
  shift 2
  pids=()
  for r in $(seq 0 $((size - 1))); do
    h=h$((r + 1)); nx=h$(((r + 1) % size + 1))
    "$S" exec "$h" "$B" --rank "$r" --size "$size" --listen "$("$S" addr "$h"):$port" \
      --next "$("$S" addr "$nx"):$port" "$@" > "$out/rank$r.out" 2> "$out/rank$r.err" &
    pids+=($!)
  done
}
wait_linked() {  # wait_linked N: every rank 0..N-1 said it linked
  local r
  for _ in $(seq 1 200); do
    local all=1
    for r in $(seq 0 $(($1 - 1))); do grep -q linked "$out/rank$r.err" 2> /dev/null || all=0; done
    [[ $all == 1 ]] && return 0
    sleep 0.05
  done
  fail "the ring did not link"
}

ring 3 29610 --mb 4 --iters 5
for p in "${pids[@]}"; do wait "$p" || fail "3-host allreduce failed"; done
grep -q '"ring_allreduce_tcp","ranks":3' "$out/rank0.out" || fail "no result from rank 0"

ring 2 29611 --mb 1 --until-error --heartbeat-ms 2000 --timeout-ms 120000
wait_linked 2
"$S" cut h2
wait
"$S" heal h2
for r in 0 1; do
  grep -q 'silent past the heartbeat timeout' "$out/rank$r.out" || fail "rank $r did not fail on the heartbeat"
  ms=$(sed -n 's/.*"ms_to_fail":\([0-9.]*\).*/\1/p' "$out/rank$r.out")
  # 2 s heartbeat; TCP alone would wait minutes. The bound leaves room for a loaded machine.
  awk -v ms="$ms" 'BEGIN { exit !(ms < 15000) }' || fail "rank $r took $ms ms to fail"
  echo "cut off: rank $r failed after $ms ms"
done

ring 3 29612 --mb 1 --until-error --heartbeat-ms 2000 --timeout-ms 120000
wait_linked 3
"$S" kill h3
wait
for r in 0 1; do
  grep -q 'ring neighbour died' "$out/rank$r.out" || fail "rank $r did not see h3 die"
done
echo "tcp_ring_test: ok"
