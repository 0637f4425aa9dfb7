#!/usr/bin/env bash
# The MLP allreduce job of the tests (tests/common/job_files.sh: mlp_toml, 4 workers), run N times:
# alone on this machine, or spread over two namespaced hosts (2 workers on each of h1 and h2, one
# ring mixing shared-memory and TCP links). Prints one line per run (exit code, wall seconds, test
# accuracy) and a summary: the accuracy range and the runs that took over 6 s (a start-up stall:
# these jobs take 2-4 s). Job directories of failed or slow runs are kept and named.
# Root and scripts/hosts.sh for `spread`; the hosts are shared: run under flock -o /tmp/troupe-hosts.lock.
# Usage: bench/job/allreduce_repeat.sh TROUPE_BINARY alone|spread N
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
S=$here/scripts/hosts.sh
B=$(realpath "$1")
mode=$2
n=$3
work=/var/tmp/troupe-allreduce-repeat-$$
cache=/var/tmp/troupe-multihost-datasets
mkdir -p "$work" "$cache"
source "$here/tests/common/job_files.sh"
if [[ $mode == spread ]]; then
  trap '"$S" down > /dev/null 2>&1' EXIT
  "$S" up 2 > /dev/null || { echo "hosts.sh up failed" >&2; exit 1; }
  bridge=$("$S" addr h1 | sed 's/\.[0-9]*$/.1/')
fi
for i in $(seq 1 "$n"); do
  name=$mode$i
  mlp_toml "$work" "$cache" "$name" > "$work/$name.toml"
  if [[ $mode == spread ]]; then
    printf '[cluster]\nhosts = ["h1:2", "h2:2"]\nhost_command = "%s exec {host}"\nadvertise = "%s"\n' \
      "$S" "$bridge" >> "$work/$name.toml"
  fi
  t0=$(date +%s.%N)
  timeout -s INT 300 "$B" run "$work/$name.toml" --job-id "$name" > "$work/$name.out" 2> "$work/$name.err"
  rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  acc=$(sed -n 's/.*"test_accuracy":\([0-9.e+-]*\).*/\1/p' "$work/$name.out" | tail -1)
  echo "$name rc=$rc secs=$secs acc=$acc"
  if [[ $rc != 0 || $(echo "$secs > 6" | bc) == 1 ]]; then echo "kept $work/jobs/$name"; else rm -rf "$work/jobs/$name"; fi
done | tee "$work/runs.txt"
awk '/ rc=/ { split($3, s, "="); split($4, a, "="); if ($2 != "rc=0") bad++; if (s[2] > 6) slow++;
              if (a[2] != "") { if (min == "" || a[2] < min) min = a[2]; if (a[2] > max) max = a[2] } n++ }
     END { printf "runs %d, failed %d, over 6 s %d, accuracy %s-%s\n", n, bad, slow, min, max }' "$work/runs.txt"
