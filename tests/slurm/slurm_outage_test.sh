#!/usr/bin/env bash
# slurmctld going down under a running `troupe run` (launcher = "slurm"). Short outage: the nodes
# keep training (slurmd keeps their jobs), the runner warns and says so on its progress line, a
# worker hung meanwhile is fenced without holding the runner (killed once the controller answers),
# a scale down's SIGTERM waits for it too, and when the controller is back the job finishes with
# every task done and no Slurm job left. Long
# outage (past [cluster] controller_timeout_s): the job fails with exit 1 naming the controller,
# waits for it to cancel what it submitted, and once it is back no Slurm job of the job is left.
# Usage: slurm_outage_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-outage
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

# 1. A 10 s outage mid-training: the job trains on and finishes.
job_file short 4 1500000 $'worker_cpus = 2\ncontroller_timeout_s = 120'
sed -i 's/^epochs = 2$/epochs = 9/' "$work/short.toml"  # about 30 s: it outlasts the outage
"$B" run "$work/short.toml" --job-id short > "$work/short.out" 2> "$work/short.err" &
runner=$!
wait_for 60 trained short 2 || fail "short: the workers did not train"
stop_controller
wait_for 60 grep -q 'Slurm controller does not answer' "$work/short.err" || fail "short: no warning"
# A worker hung meanwhile (SIGSTOP: the hosts share this PID namespace) is declared dead, and its
# fence waits for the controller without holding the runner: the progress line goes on (a fence
# that retried scancel on the runner's loop printed nothing for 20 s, seen on CI).
hung=$(pgrep -f -- "jobs/short --role worker --index 1 --incarnation" | head -1)
[[ -n $hung ]] || fail "short: worker-1's process not found"
kill -STOP "$hung"
wait_for 30 grep -q 'worker-1.*declared dead by the master: fencing it once the cluster manager answers' \
  "$work/short.err" || fail "short: the hung worker-1 was not declared dead, or not said to wait"
down_lines() { grep -o 'SLURM CONTROLLER NOT ANSWERING' "$work/short.err" | wc -l; }
more_lines() { [[ $(down_lines) -ge $1 ]]; }
n=$(down_lines)
wait_for 15 more_lines $((n + 3)) || fail "short: no progress line after the fence ($n -> $(down_lines))"
# A scale down meanwhile: worker-3's SIGTERM waits for the controller too (it was tried once, for
# 18 s on the runner's loop, and lost: the worker never left).
"$B" scale --workers 3 --job-dir "$work/jobs/short" > "$work/short.scale" 2>&1 || fail "short: troupe scale: $(cat "$work/short.scale")"
wait_for 10 grep -q 'scale: worker-3.* leaves' "$work/short.err" || fail "short: worker-3 was not asked to leave"
done_at() { "$B" status --job-dir "$work/jobs/short" --json 2> /dev/null | sed -n 's/.*"done":\([0-9]*\).*/\1/p' | head -1; }
done_after() { local d; d=$(done_at); [[ -n $d && $d -gt $1 ]]; }
d1=$(done_at)
[[ -n $d1 ]] || fail "short: no status while slurmctld was down"
# The outage itself: training must move on while slurmctld is down (waited for as the event, a task
# done after the controller stopped answering).
wait_for 60 done_after "$d1" || fail "short: no task done while slurmctld was down ($d1 -> $(done_at))"
d2=$(done_at)
# The progress line comes every 2 s: waited for, not read once.
wait_for 10 grep -q 'SLURM CONTROLLER NOT ANSWERING' "$work/short.err" || fail "short: the progress line does not say it"
bash "$S" up > "$work/up2.log" 2>&1 || fail "slurm-cluster.sh up after the outage"
# The fence lands once the controller answers: the hung worker dies by SIGKILL and is relaunched
# while the job runs (its end at the job's end would be the final cancel's, not the fence's).
wait_for 60 grep -qE 'worker-1#[0-9]+ .*: relaunching' "$work/short.err" ||
  fail "short: the hung worker-1 was not fenced once the controller answered"
wait_for 60 grep -qE 'worker-3#[0-9]+ exited with code 0' "$work/short.err" ||
  fail "short: worker-3 did not leave once the controller answered"
wait "$runner" || fail "short: the job failed after the outage"
grep -q 'answers again' "$work/short.err" || fail "short: the runner did not see the controller back"
[[ $(field short tasks_failed) == 0 ]] || fail "short: failed tasks: $(result short)"
! kill -0 "$hung" 2> /dev/null || fail "short: the hung worker-1 ($hung) outlived the job"
no_jobs_left short || fail "short: Slurm jobs left behind"
echo "short outage: tasks done $d1 -> $d2 while down; $(result short)"

# 2. An outage past controller_timeout_s (5 s): exit 1 naming the controller; the runner waits for
#    it to cancel its jobs, and once it is back none is left.
job_file long 2 1500000 $'worker_cpus = 2\ncontroller_timeout_s = 5'
sed -i 's/^epochs = 2$/epochs = 12/' "$work/long.toml"
"$B" run "$work/long.toml" --job-id long > "$work/long.out" 2> "$work/long.err" &
runner=$!
wait_for 60 trained long 2 || fail "long: the workers did not train"
stop_controller
wait_for 90 grep -q 'not cancelled yet' "$work/long.err" || fail "long: the runner does not wait to cancel its jobs"
grep -q 'Slurm controller has not answered for' "$work/long.err" || fail "long: the cause is not named"
bash "$S" up > "$work/up3.log" 2>&1 || fail "slurm-cluster.sh up after the long outage"
wait "$runner"
rc=$?
[[ $rc == 1 ]] || fail "long: exit $rc, expected 1"
grep -q 'every Slurm job of the job is cancelled' "$work/long.err" || fail "long: the runner did not cancel its jobs"
wait_for 30 no_jobs_left long || fail "long: Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
grep -q 'controller' "$work/jobs/long/result.json" || fail "long: result.json does not name the cause"
echo "PASS"
