#!/usr/bin/env bash
# An MLP allreduce job with launcher = "slurm" on the Slurm test cluster: 4 workers, each a Slurm job
# of its own (2 CPUs: at most two on a host), so the ring mixes shared-memory links (workers on one
# host) and TCP links (across hosts). Every task is done once and the test accuracy is within 0.01
# of the same job run on this machine alone (tests/common/job_files.sh: mlp_toml).
# Usage: slurm_allreduce_test.sh TROUPE_BINARY.
# Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-allreduce
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

mlp_file() {  # mlp_file NAME CLUSTER_SECTION
  { mlp_toml "$work" "$cache" "$1"; echo "$2"; } > "$work/$1.toml"
}
slurm='[cluster]
launcher = "slurm"
control_partition = "high"
worker_partition = "low"
control_host = "h1"
worker_cpus = 2'
for j in alone spread; do
  if [[ $j == alone ]]; then mlp_file $j ""; else mlp_file $j "$slurm"; fi
  "$B" run "$work/$j.toml" --job-id $j --quiet > "$work/$j.out" 2> "$work/$j.err" || fail "$j: the job failed"
done
for j in alone spread; do
  [[ $(field $j records_done) == 240000 && $(field $j tasks_failed) == 0 ]] || fail "$j: $(result $j)"
done
logs=$work/jobs/spread/logs
hosts=$(grep -ho 'up at [0-9.]*' "$logs"/worker-*.log | sort -u | wc -l)
echo "spread: workers on $hosts host(s); ring links: $(grep -ho '([a-zA-Z ]*), linked' "$logs"/worker-*.log | sort | uniq -c | tr '\n' ';')"
[[ $hosts -ge 2 ]] || fail "spread: every worker on one host"
a=$(field alone test_accuracy) b=$(field spread test_accuracy)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  fail "accuracy on Slurm $b, alone $a: more than 0.01 apart"
wait_for 20 no_jobs_left spread || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
echo "alone: accuracy $a; on Slurm ($hosts hosts): $b"
echo "PASS"
