#!/usr/bin/env bash
# A ring that mixes shared memory and TCP against an all-TCP ring over the same hosts: 4 ranks, 2 in
# each of 2 scripts/hosts.sh namespaces (ranks 0,1 on h1; 2,3 on h2), 1 MB and 64 MB allreduces,
# through the ring session (bench/collective/ring_session_rank). Mixed: ranks on one host link over
# its /dev/shm, across hosts over TCP. All-TCP: every rank gets a host key of its own, so the pairs
# inside a host link over TCP too. Root and a release build needed. Prints JSON lines tagged with
# the ring kind. Usage: bench/collective/mixed_hosts_run.sh [ROUNDS] (alternating runs, default 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
S=scripts/hosts.sh
B=$(realpath build/release/bench/collective/ring_session_rank)
rounds=${1:-3}
errs=$(mktemp /tmp/mixed_hosts_run.XXXXXX.err)  # the ranks' stderr
echo "ranks' stderr: $errs" >&2
trap '"$S" down > /dev/null 2>&1' EXIT
"$S" up 2 > /dev/null
a1=$("$S" addr h1)
a2=$("$S" addr h2)
place=(h1 h1 h2 h2)
port=29800
run() {  # run KIND KEYS MB ITERS
  local kind=$1 keys=$2 mb=$3 iters=$4 r addrs
  addrs="$a1:$port,$a1:$((port + 1)),$a2:$((port + 2)),$a2:$((port + 3))"
  port=$((port + 4))
  for r in 0 1 2 3; do
    "$S" exec "${place[$r]}" "$B" --rank $r --hosts "$keys" --addrs "$addrs" --job "bench$port" --mb "$mb" \
      --iters "$iters" --timeout-ms 600000 2>> "$errs" | grep '^{' | sed "s/^{/{\"ring\":\"$kind\",/" &
  done
  wait
}
for _ in $(seq 1 "$rounds"); do
  for mb in 1 64; do
    iters=$([[ $mb == 1 ]] && echo 100 || echo 10)
    run mixed "$a1,$a1,$a2,$a2" $mb $iters
    run all_tcp "k0,k1,k2,k3" $mb $iters
  done
done
