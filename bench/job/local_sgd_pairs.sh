#!/usr/bin/env bash
# A local_sgd job (Fashion-MNIST MLP 784-64-10, 3 workers, 2 epochs, tasks of 500 rows, sync_every 8)
# run with two troupe binaries in alternating pairs (A B, B A, ...): what holding a task's report
# until its rows are averaged costs, and what it changes in the model. Prints one line per run (the
# binary, exit code, wall seconds of the whole `troupe run`, test accuracy, tasks re-queued) and
# the medians.
# Usage: bench/job/local_sgd_pairs.sh TROUPE_A TROUPE_B PAIRS
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
A=$(realpath "$1")
B=$(realpath "$2")
pairs=$3
work=/var/tmp/troupe-local-sgd-pairs-$$
cache=/var/tmp/troupe-local-sgd-datasets
mkdir -p "$work" "$cache"
source "$here/tests/common/job_files.sh"
run() {  # run LABEL BINARY NAME
  mlp_toml "$work" "$cache" "$3" | sed -e 's/strategy = "allreduce"/strategy = "local_sgd"\nsync_every = 8/' \
    -e 's/workers = 4/workers = 3/' -e 's/epochs = 4/epochs = 2/' > "$work/$3.toml"
  local t0 rc secs acc requeued
  t0=$(date +%s.%N)
  timeout -s INT 600 "$2" run "$work/$3.toml" --job-id "$3" > "$work/$3.out" 2> "$work/$3.err"
  rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  acc=$(sed -n 's/.*"test_accuracy":\([0-9.e+-]*\).*/\1/p' "$work/$3.out" | tail -1)
  requeued=$(sed -n 's/.*"tasks_requeued":\([0-9]*\).*/\1/p' "$work/$3.out" | tail -1)
  echo "$1 rc=$rc secs=$secs acc=$acc requeued=${requeued:-?}"
  rm -rf "$work/jobs/$3"
}
run warm "$A" warm > /dev/null  # fills the dataset cache
for i in $(seq 1 "$pairs"); do
  if (( i % 2 )); then run A "$A" a$i; run B "$B" b$i; else run B "$B" b$i; run A "$A" a$i; fi
done | tee "$work/runs.txt"
for label in A B; do
  awk -v l="$label" '$1 == l { split($3, s, "="); split($4, a, "="); print s[2], a[2] }' "$work/runs.txt" |
    sort -n | awk -v l="$label" '{ t[NR] = $1; acc += $2 } END {
      printf "%s: median %.2f s over %d runs, mean accuracy %.4f\n", l, t[int((NR + 1) / 2)], NR, acc / NR }'
done
rm -rf "$work"
