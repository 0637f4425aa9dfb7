#!/usr/bin/env bash
# One ring mixing shared memory and TCP (scripts/hosts.sh): 4 ranks, ranks 0 and 1 on host h1, 2 and
# 3 on h2; each pair inside a host links over its host's private /dev/shm, the pairs across hosts
# over TCP, and every rank checks every element of its allreduce sums. Usage:
# mixed_ring_test.sh RANK_BINARY (bench/collective/ring_session_rank). Exit 77 (ctest: skipped)
# without root, saying why.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
S="$here/scripts/hosts.sh"
B=$(realpath "$1")
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: hosts.sh needs root (network and mount namespaces)"; exit 77; fi
out=$(mktemp -d)
fail() { echo "FAIL: $*"; for f in "$out"/*; do echo "== $f"; cat "$f"; done; exit 1; }
trap '"$S" down > /dev/null 2>&1; rm -rf "$out"' EXIT
"$S" up 2 > /dev/null || fail "hosts up"
a1=$("$S" addr h1)
a2=$("$S" addr h2)
place=(h1 h1 h2 h2)
addrs="$a1:29630,$a1:29631,$a2:29632,$a2:29633"
pids=()
# A job name of this run's own: hosts kept up by the Slurm tests keep their /dev/shm, and a beacon
# an earlier run left (released) would read as a neighbour already gone.
for r in 0 1 2 3; do
  "$S" exec "${place[$r]}" "$B" --rank "$r" --hosts "$a1,$a1,$a2,$a2" --addrs "$addrs" --job "mixedtest-$$" \
    --mb 4 --iters 5 --timeout-ms 60000 > "$out/rank$r.out" 2>&1 &
  pids+=($!)
done
for r in 0 1 2 3; do wait "${pids[$r]}" || fail "rank $r failed (exit $?)"; done
grep -q '"ring_session_allreduce","ranks":4' "$out/rank0.out" || fail "no result from rank 0"
# Every rank has one neighbour on its host and one on the other: each links over shm and TCP.
for r in 0 1 2 3; do grep -q "rank $r of 4 (shm and TCP)" "$out/rank$r.out" || fail "rank $r: not a mixed link"; done
grep '"ring_session_allreduce"' "$out/rank0.out"
echo "mixed_ring_test: ok"
