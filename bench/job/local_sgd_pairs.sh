#!/usr/bin/env bash
# A local_sgd job (Fashion-MNIST MLP 784-64-10, 3 workers, 2 epochs, tasks of 500 rows, sync_every 8)
# run with two troupe binaries in alternating pairs (A B, B A, ...). Prints one line per run (the
# binary, exit code, wall seconds of the whole `troupe run`, test accuracy, tasks re-queued, tasks
# given back by a holder that went on, steps trained by every worker, TROUPE_STEP_LOG's) and the medians.
# KILL_AT=S: SIGKILL worker-1 S seconds into each run (the runner relaunches it); SYNC_EVERY=N
# (default 8) and MAX_RATE=R (max_samples_per_s a worker, default none) make the rounds rarer and
# the job longer, so that the kill lands between rounds.
# Usage: [KILL_AT=S] [SYNC_EVERY=N] [MAX_RATE=R] bench/job/local_sgd_pairs.sh TROUPE_A TROUPE_B PAIRS
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
A=$(realpath "$1")
B=$(realpath "$2")
pairs=$3
work=/var/tmp/troupe-local-sgd-pairs-$$
cache=/var/tmp/troupe-local-sgd-datasets
mkdir -p "$work" "$cache"
source "$here/tests/common/job_files.sh"
rate=""
[[ -n "${MAX_RATE:-}" ]] && rate="\nmax_samples_per_s = $MAX_RATE"
run() {  # run LABEL BINARY NAME
  mlp_toml "$work" "$cache" "$3" |
    sed -e "s/strategy = \"allreduce\"/strategy = \"local_sgd\"\nsync_every = ${SYNC_EVERY:-8}/" \
      -e 's/workers = 4/workers = 3/' -e "s/epochs = 4/epochs = 2$rate/" > "$work/$3.toml"
  local t0 rc secs acc requeued back steps
  t0=$(date +%s.%N)
  mkdir -p "$work/$3.steps"
  TROUPE_STEP_LOG="$work/$3.steps" timeout -s INT 600 "$2" run "$work/$3.toml" --job-id "$3" > "$work/$3.out" \
    2> "$work/$3.err" &
  local runner=$!
  if [[ -n "${KILL_AT:-}" ]]; then
    sleep "$KILL_AT"
    pkill -KILL -f -- "--job-dir $work/jobs/$3 --role worker --index 1 " || echo "$1: no worker-1 to kill" >&2
  fi
  wait "$runner"
  rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  acc=$(sed -n 's/.*"test_accuracy":\([0-9.e+-]*\).*/\1/p' "$work/$3.out" | tail -1)
  requeued=$(sed -n 's/.*"tasks_requeued":\([0-9]*\).*/\1/p' "$work/$3.out" | tail -1)
  back=$(grep -c ' given back: ' "$work/jobs/$3/events.jsonl" 2>/dev/null)
  steps=$(cat "$work/$3.steps"/* 2>/dev/null | grep -c .)
  echo "$1 rc=$rc secs=$secs acc=$acc requeued=${requeued:-?} given_back=${back:-0} steps=$steps"
  rm -rf "$work/jobs/$3" "$work/$3.steps"
}
run warm "$A" warm > /dev/null  # fills the dataset cache
for i in $(seq 1 "$pairs"); do
  if (( i % 2 )); then run A "$A" a$i; run B "$B" b$i; else run B "$B" b$i; run A "$A" a$i; fi
done | tee "$work/runs.txt"
for label in A B; do
  awk -v l="$label" '$1 == l { split($3, s, "="); split($4, a, "="); split($6, g, "="); split($7, n, "=");
      print s[2], a[2], g[2], n[2] }' "$work/runs.txt" |
    sort -n | awk -v l="$label" '{ t[NR] = $1; acc += $2; back += $3; steps += $4 } END {
      printf "%s: median %.2f s over %d runs, mean accuracy %.4f, mean tasks given back %.1f, mean steps %.1f\n",
        l, t[int((NR + 1) / 2)], NR, acc / NR, back / NR, steps / NR }'
done
rm -rf "$work"
