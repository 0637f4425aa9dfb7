#!/usr/bin/env bash
# [cluster] spare_partition on the test cluster (4 hosts x 4 CPUs): job A (2 workers of its own, up
# to 13) fills the whole cluster, its 11 extra workers in the `spare` partition; job B (4 workers, its
# control plane on h2) is submitted while A trains. B does not wait for A: its nodes preempt A's
# spare workers (Slurm's own preemption: `low` and `high` preempt `spare`), B trains while A goes on
# with fewer workers, and both finish with every task done once. `troupe scale` down on A sends its
# own worker beyond the new target back to `spare`. Workers are paced (2000 samples/s)
# so that 16 of them stay below what the machine's cores give. Usage: slurm_spare_test.sh TROUPE_BINARY.
# Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-spare
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

pace() { sed -i 's/^learning_rate = 0.01$/learning_rate = 0.01\nmax_samples_per_s = 2000/' "$work/$1.toml"; }
job_file spare-a 2 300000 'spare_partition = "spare"
worker_cpus = 1'
sed -i 's/^max_workers = 8$/max_workers = 13/; s/^epochs = 2$/epochs = 4/' "$work/spare-a.toml"
pace spare-a
job_file spare-b 4 100000 'worker_cpus = 1'
sed -i 's/^control_host = "h1"$/control_host = "h2"/' "$work/spare-b.toml"
pace spare-b

"$B" run "$work/spare-a.toml" --job-id spare-a > "$work/spare-a.out" 2> "$work/spare-a.err" &
ra=$!
full() { [[ $(sinfo -h -o %C | cut -d/ -f1) == 16 ]]; }
wait_for 120 full || fail "job A did not fill the cluster: $(sinfo -h -o %C)"
spares=$(squeue -h -t R -p spare -o %j | grep -c '^troupe-spare-a:worker-')
[[ $spares -ge 8 ]] || fail "only $spares of A's workers run in the spare partition: $(squeue -h -o '%j %P %T')"
mine=$(squeue -h -t R -p low -o %j | grep -c '^troupe-spare-a:worker-')
[[ $mine == 2 ]] || fail "A has $mine workers of its own running in low, expected 2"
echo "A fills the cluster: 2 workers of its own, $spares spare"

# A scale down in spare mode: A's own worker beyond the new target leaves the worker partition
# (where B's own workers could not preempt it) and is resubmitted to `spare`.
"$B" scale --workers 1 --job-dir "$work/jobs/spare-a" > "$work/scale.out" 2>&1 || fail "scale A to 1: $(cat "$work/scale.out")"
demoted() {
  [[ $(squeue -h -p low -t R,PD -o %j | grep -c '^troupe-spare-a:worker-') == 1 ]] &&
    squeue -h -p spare -o %j | grep -q '^troupe-spare-a:worker-1$'
}
wait_for 60 demoted || fail "A scaled to 1: $(squeue -h -o '%j %P %T' | grep spare-a:worker | sort | tr '\n' ' ')"
echo "A scaled to 1 worker of its own: worker-1 back in spare"

"$B" run "$work/spare-b.toml" --job-id spare-b > "$work/spare-b.out" 2> "$work/spare-b.err" ||
  fail "job B failed"
# B did not wait for A: its first step came while A still ran. (That A still ran when B ended was
# the check until 2026-12-07: under the default suite's load A once ended 15 s before B, B having
# trained beside it for 10 s.)
if ! kill -0 $ra 2> /dev/null; then
  a_end=$(($(stat -c %Y "$work/jobs/spare-a/result.json") * 1000))
  b_first=$(field spare-b first_step_wall_ms)
  [[ -n $b_first ]] && ((b_first < a_end)) ||
    fail "job B's first step (${b_first:-none}) came after job A's end ($a_end): B waited for A"
fi
wait $ra || fail "job A failed"
for j in spare-a spare-b; do
  [[ $(field $j tasks_failed) == 0 ]] || fail "$j: $(result $j)"
done
[[ $(field spare-a records_done) == 1200000 && $(field spare-b records_done) == 200000 ]] ||
  fail "records: A $(field spare-a records_done), B $(field spare-b records_done)"
pre=$(grep -c '"kind":"preempted"' "$work/jobs/spare-a/events.jsonl")
[[ $pre -ge 4 ]] || fail "A lost $pre workers to preemption, expected B's 7 nodes to take at least 4"
no_jobs_left spare || fail "Slurm jobs left: $(squeue -h -o %j)"
echo "OK: B trained beside A ($pre of A's spare workers preempted); A $(field spare-a records_done) records, B $(field spare-b records_done), AUC $(field spare-a test_auc) / $(field spare-b test_auc)"
