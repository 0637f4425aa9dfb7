#!/usr/bin/env bash
# `troupe chaos` against a job on the Slurm test cluster: faults go through slurmctld (the nodes
# run on other hosts, nodes.json lists their Slurm jobs, no local pids). A worker killed
# (`scancel --batch --signal=9`: with --full, Slurm makes a KILL a cancel) and one SIGSTOPped (fenced by the runner or resumed) are detected and
# replaced; `preempt` submits a high-priority job that takes a worker's host for a few seconds:
# the workers there leave on Slurm's SIGTERM, are resubmitted and train again. The job finishes
# with every task done, and no Slurm job is left.
# Usage: slurm_chaos_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-chaos
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

# Workers of 2 CPUs: two on each of h2..h4 at most, none on h1 (master and shards leave it 1 CPU).
job_file chaos 4 1500000 "worker_cpus = 2"
sed -i 's/^epochs = 2$/epochs = 8/' "$work/chaos.toml"
"$B" run "$work/chaos.toml" --job-id chaos --quiet > "$work/chaos.out" 2> "$work/chaos.err" &
runner=$!
wait_for 90 trained chaos 4 || fail "the workers did not train"
"$B" chaos --job-dir "$work/jobs/chaos" --fault "0 kill worker-0" --fault "3 stop worker-1 hold=2" \
  --fault "8 preempt worker-2 hold=4" --settle 60 --report "$work/report.json" > "$work/chaos.report" 2>&1 ||
  fail "troupe chaos: $(cat "$work/chaos.report")"
wait "$runner" || fail "the job failed under chaos"
python3 - "$work/report.json" << 'PY' || fail "report: $(cat "$work/report.json")"
import json, sys
r = json.load(open(sys.argv[1]))
by = {f["kind"]: f for f in r["faults"]}
for kind in ("kill", "stop", "preempt"):
    f = by[kind]
    assert f["slurm_job"] > 0 and f["pid"] == 0, (kind, "not a Slurm job", f)
    assert not f["note"], (kind, f["note"])
    assert f["detected_s"] is not None and f["recovered_s"] is not None, (kind, "not detected/recovered", f)
    print("%-8s %-12s Slurm job %d: detected %.2f s, recovered %.2f s" % (kind, f["node"], f["slurm_job"], f["detected_s"], f["recovered_s"]))
PY
logs=$work/jobs/chaos/logs
grep -q 'worker-2#0 down: left on SIGTERM' "$logs/master.log" || fail "the preempted worker did not leave on SIGTERM"
# The kill is a kill: Slurm turns `scancel --signal=KILL` into a cancel (SIGTERM first), on which the
# worker left cleanly (exit 0) until 2026-11-30; a KILL to the batch step alone ends it with no
# handler running.
! grep -q 'worker-0#0: stopping' "$logs/worker-0.log" || fail "the killed worker ran its stop handler: $(tail -3 "$logs/worker-0.log")"
grep -Eq 'worker-0#0.*(SIGKILL|signal 9)' "$logs/runner.log" || fail "the runner did not see worker-0 killed: $(grep worker-0#0 "$logs/runner.log")"
grep -q 'PREEMPTED' "$work/chaos.err" || fail "the runner saw no PREEMPTED worker"
[[ $(field chaos tasks_failed) == 0 ]] || fail "failed tasks: $(result chaos)"
wait_for 20 no_jobs_left chaos || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
result chaos
echo "PASS"
