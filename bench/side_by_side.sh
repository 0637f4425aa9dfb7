#!/usr/bin/env bash
# Side by side: two trees (A, B), each its own bench scripts and Release binaries (copied out first),
# alternating A B, B A, ... per round: allreduce 2/4 ranks 1/64 MB, PS 1/4 clients, DeepFM end to end,
# recovery, control plane at 1,000 workers (docs/benchmarks.md, "Restructure III side by side").
# Usage: bench/side_by_side.sh TREE_A TREE_B [ROUNDS] [OUTDIR]   (each tree built: build/release)
set -u
TREE_A=$(realpath "$1"); TREE_B=$(realpath "$2"); ROUNDS=${3:-3}; OUT=${4:-/tmp/side_by_side}; mkdir -p "$OUT"
echo -20 > /proc/self/autogroup 2>/dev/null || true
declare -A TREE=([A]=$TREE_A [B]=$TREE_B)
bins=$OUT/bins; mkdir -p $bins/A $bins/B /tmp/bside
for t in A B; do
  b=${TREE[$t]}/build/release
  cp $b/troupe $bins/$t/ 2>/dev/null; cp $b/libtroupe_torchscript.so $bins/$t/ 2>/dev/null
  cp $b/bench/collective/allreduce_bench $b/bench/ps/ps_bench $b/bench/control/control_bench $bins/$t/
done
run() { # tree name cmd...
  local t=$1 name=$2; shift 2
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local t0=$(date +%s.%N)
  ( cd ${TREE[$t]} && "$@" ) > "$OUT/$name.$t.$(date +%H%M%S).out" 2>&1
  echo "$(date +%T) $t $name load=$load rc=$? $(echo "$(date +%s.%N) - $t0" | bc) s" | tee -a "$OUT/log.txt"
}
one_round() {
  for t in "$@"; do
    run $t ar2_1 $bins/$t/allreduce_bench --ranks 2 --mb 1 --iters 200 --capacity-kb 1024
    run $t ar2_64 $bins/$t/allreduce_bench --ranks 2 --mb 64 --iters 20 --capacity-kb 1024
    run $t ar4_1 $bins/$t/allreduce_bench --ranks 4 --mb 1 --iters 200 --capacity-kb 1024
    run $t ar4_64 $bins/$t/allreduce_bench --ranks 4 --mb 64 --iters 20 --capacity-kb 1024
    run $t ps1 $bins/$t/ps_bench --loopback --seconds 6 --clients 1
    run $t ps4 $bins/$t/ps_bench --loopback --seconds 6 --clients 4
    run $t e2e /usr/bin/python3 bench/job/job_bench.py --only e2e --build build/release --work /tmp/bside/jb_$t
    run $t recovery /usr/bin/python3 bench/recovery/recovery_bench.py build/release/troupe --troupe-only
    run $t control $bins/$t/control_bench --troupe $bins/$t/troupe --workers 1000 --seconds 5 --task-ms 80 --no-etcd --io-threads 2
  done
}
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then one_round A B; else one_round B A; fi
done
echo done >> "$OUT/log.txt"
