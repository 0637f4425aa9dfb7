#!/usr/bin/env bash
# `troupe run` with [cluster] launcher = "slurm" on the test cluster (scripts/slurm-cluster.sh:
# slurmctld + 4 slurmd in namespaced hosts): a DeepFM async-PS job finishes with every task done;
# a high-priority job preempts two workers mid-training, the job keeps training, the victims leave
# on Slurm's SIGTERM and come back as new incarnations when the high job ends; more workers than
# fit wait PENDING and join later; cancelled control nodes come back; bad input (an unknown
# partition, no Slurm commands, slurmctld down) is a clear error with the documented exit code and
# leaves no Slurm job behind; worker_host and `troupe scale --host` place workers on a host.
# Usage: slurm_job_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-job
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

# 1. A job on the cluster's hosts finishes: every task done, none failed, nothing left in Slurm's
#    queue, its test AUC within 0.01 of the same job on the local launcher.
job_file plain 4 200000 "worker_cpus = 2"
"$B" run "$work/plain.toml" --job-id plain --quiet > "$work/plain.out" 2> "$work/plain.err" || fail "plain job failed"
[[ $(field plain tasks_failed) == 0 ]] || fail "plain: failed tasks: $(result plain)"
[[ -n $(field plain tasks_done) ]] || fail "plain: no result: $(result plain)"
no_jobs_left plain || fail "plain: Slurm jobs left behind"
hosts=$(grep -ho 'up at [0-9.]*' "$work"/jobs/plain/logs/worker-*.log | sort -u | wc -l)
echo "plain: $(result plain) (workers on $hosts hosts)"
# The same job on the local launcher: the test AUC within 0.01 of it.
sed '/^\[cluster\]/,$d' "$work/plain.toml" | sed 's/^name = "plain"/name = "local"/' > "$work/local.toml"
"$B" run "$work/local.toml" --job-id local --quiet > "$work/local.out" 2> "$work/local.err" || fail "local job failed"
awk -v a="$(field plain test_auc)" -v b="$(field local test_auc)" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }' ||
  fail "test AUC on Slurm $(field plain test_auc) vs local $(field local test_auc): more than 0.01 apart"

# 1b. worker_host: the job's first workers start on that host (h3), both of them.
job_file placed 2 20000 'worker_host = "h3"'
"$B" run "$work/placed.toml" --job-id placed --quiet > "$work/placed.out" 2> "$work/placed.err" || fail "placed job failed"
[[ $(grep -ho 'up at [0-9.]*' "$work"/jobs/placed/logs/worker-*.log | sort -u) == "up at 10.78.0.13" ]] ||
  fail "placed: workers not all on h3: $(grep -ho 'up at [0-9.]*' "$work"/jobs/placed/logs/worker-*.log)"
echo "placed: $(result placed)"

# 2. Preemption: workers of 2 CPUs each fill h2 and h3 (h1 holds master and shards); a
#    high-priority job takes h3 and h4 whole, preempting the two workers on h3. They leave on
#    Slurm's SIGTERM, are resubmitted and wait PENDING until the high job ends, then train again.
# pace NAME RATE: each worker of the job trains at most RATE samples/s, so that the job lasts
# as long as the steps below need however fast the machine and the PS are.
pace() { sed -i "s/^learning_rate = 0.01\$/learning_rate = 0.01\nmax_samples_per_s = $2/" "$work/$1.toml"; }
job_file preempt 4 1500000 "worker_cpus = 2"
# Long enough that the victims' next incarnations train after the high job's 4 s: 4 passes of
# 1.5M samples at most 4 x 60k samples/s last 25 s or more (unpaced, 6 passes ended before Slurm
# had started the victims again once the PS got faster).
sed -i 's/^epochs = 2$/epochs = 4/' "$work/preempt.toml"
pace preempt 60000
"$B" run "$work/preempt.toml" --job-id preempt --quiet > "$work/preempt.out" 2> "$work/preempt.err" &
runner=$!
logs=$work/jobs/preempt/logs
for _ in $(seq 1 600); do
  [[ $(grep -l 'first task' "$logs"/worker-*.log 2> /dev/null | wc -l) -ge 4 ]] && break
  sleep 0.1
done
[[ $(grep -l 'first task' "$logs"/worker-*.log 2> /dev/null | wc -l) -ge 4 ]] || fail "preempt: 4 workers did not train"
# nodes.json names where to scrape the master's /metrics: its host's address (it named a loopback
# address of h1 before 2026-11-30), answering with the job's token.
maddr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metrics_address"])' "$work/jobs/preempt/nodes.json")
[[ $maddr == 10.78.* ]] || fail "preempt: metrics_address $maddr is not the master's host"
# The series appear with the master's first metrics tick: asked for a few seconds (the workers can
# be training before it).
scraped=0
for _ in $(seq 1 50); do
  if curl -sf -H "Authorization: Bearer $(cat "$work/jobs/preempt/token")" "http://$maddr/metrics" |
    grep -q '^troupe_samples_total'; then
    scraped=1
    break
  fi
  sleep 0.2
done
[[ $scraped == 1 ]] || fail "preempt: no /metrics at $maddr"
victim_host=$(squeue -h -p low -o '%N %j' | awk '$2 ~ /preempt:worker/ {print $1}' | sort | uniq -c | awk '$1 == 2 {print $2}' | grep -v h1 | head -1)
[[ -n $victim_host ]] || fail "preempt: no host runs two workers: $(squeue -h -o '%N %j %T')"
other=$(for h in h2 h3 h4; do [[ $h != "$victim_host" ]] && [[ -z $(squeue -h -w "$h" -o %j) ]] && echo "$h"; done | head -1)
[[ -n $other ]] || fail "preempt: no empty host beside $victim_host"
high=$(sbatch --parsable -p high -w "$victim_host,$other" -N 2 --exclusive -J troupe-test-high -o /dev/null --wrap 'sleep 4') || fail "sbatch high"
for _ in $(seq 1 600); do
  [[ $(grep -c 'down: left on SIGTERM' "$logs/master.log") -ge 2 ]] && break
  sleep 0.1
done
[[ $(grep -c 'down: left on SIGTERM' "$logs/master.log") -ge 2 ]] || fail "preempt: the victims did not leave on SIGTERM"
wait "$runner" || fail "preempt: the job failed"
grep -q 'PREEMPTED' "$work/preempt.err" || fail "preempt: the runner saw no PREEMPTED worker"
# The victims are the workers the runner saw PREEMPTED (at the job's end every worker leaves on SIGTERM
# too, before the master stops).
# The master's word that it trained: "worker-1#1 finished its training loop after N steps", N > 0.
# (The worker's own log, where Slurm appends both incarnations' output, was read before 2026-12-07;
# once in CI it lacked worker-1#1's "first task" line after its "up at" line while the master counted
# its 8,399 steps. Its lines are printed when they disagree.)
for v in $(grep -o 'worker-[0-9]*#0 exited with code 0 (PREEMPTED)' "$work/preempt.err" | cut -d'#' -f1 | sort -u); do
  grep -qE "$v#1 finished its training loop after [1-9][0-9]* steps" "$logs/master.log" ||
    fail "preempt: $v#1 (the victim's next incarnation) did not train"
  awk -v up="$v#1 (worker) up at" 'index($0, up) {u = 1} u && /first task/ {f = 1} END {exit !f}' "$logs/$v.log" ||
    { echo "note: $v.log has no 'first task' after '$v#1 (worker) up at':"; grep -n 'up at\|first task\|==== ' "$logs/$v.log"; }
done
[[ $(field preempt tasks_failed) == 0 ]] || fail "preempt: failed tasks: $(result preempt)"
no_jobs_left preempt || fail "preempt: Slurm jobs left behind"
echo "preempt: $(result preempt)"

# 3. More workers than fit, and control nodes cancelled: h4 is held by another job, so of 4
#    workers of 4 CPUs two run (h2, h3) and two wait PENDING; the job trains meanwhile. The jobs of
#    ps-0 and of the master are cancelled (scancel): both are resubmitted and resume (checkpoint,
#    journal). `troupe scale` down to 3 cancels a waiting worker; `troupe scale --host` places the
#    worker it adds (a host Slurm's partition lacks is refused); when the other job ends, the
#    other waiting worker starts on h4 and joins.
other=$(sbatch --parsable -p low -w h4 --exclusive -J troupe-test-other -o /dev/null --wrap 'sleep 20') || fail "sbatch other"
job_file grow 4 1500000 "worker_cpus = 4"
# 2 passes at most 2 x 50k samples/s until h4 frees: 30 s or more, past the other job's 20 s.
pace grow 50000
"$B" run "$work/grow.toml" --job-id grow > "$work/grow.out" 2> "$work/grow.err" &
runner=$!
logs=$work/jobs/grow/logs
for _ in $(seq 1 600); do
  grep -q 'first checkpoint' "$logs/ps-0.log" 2> /dev/null && [[ $(grep -l 'first task' "$logs"/worker-*.log 2> /dev/null | wc -l) -ge 2 ]] && break
  sleep 0.1
done
# The progress line is printed every few seconds: the two queued workers stay so for the other
# job's 20 s (one look, as the first tasks began, found no line printed since: CI, 2026-12-04).
for _ in $(seq 1 150); do
  grep -q 'starting or queued' "$work/grow.err" && break
  sleep 0.1
done
grep -q 'starting or queued' "$work/grow.err" || fail "grow: the progress line shows no queued worker"
# troupe status shows them too (workers_launched counts the queued ones; the table says so).
"$B" status --job-dir "$work/jobs/grow" > "$work/grow.status" 2>&1 || fail "grow: status: $(cat "$work/grow.status")"
grep -q 'starting or queued' "$work/grow.status" || fail "grow: troupe status shows no queued worker: $(cat "$work/grow.status")"
# troupe status and scale reach the runner from here as for a local job; the scale-down cancels
# the highest-numbered worker, still PENDING.
"$B" status --job-dir "$work/jobs/grow" > "$work/grow.status" 2>&1 || fail "grow: troupe status: $(cat "$work/grow.status")"
"$B" scale --workers 3 --job-dir "$work/jobs/grow" > "$work/grow.scale" 2>&1 || fail "grow: troupe scale: $(cat "$work/grow.scale")"
for _ in $(seq 1 100); do [[ -z $(squeue -h -n troupe-grow:worker-3) ]] && break; sleep 0.1; done
[[ -z $(squeue -h -n troupe-grow:worker-3) ]] || fail "grow: scale-down left worker-3's job queued"
# troupe scale --host: a host the worker partition does not have is refused, naming it, and
# nothing changes (no worker submitted); one it has gets the worker the scale adds (sbatch -w: its
# requested node, h2, full, so it waits there), which the next scale-down cancels.
"$B" scale --workers 4 --host nosuch --job-dir "$work/jobs/grow" > "$work/grow.nosuch" 2>&1 && fail "grow: scale --host nosuch was taken"
grep -q "host 'nosuch': not a node of partition 'low'" "$work/grow.nosuch" || fail "grow: scale --host nosuch: $(cat "$work/grow.nosuch")"
[[ -z $(squeue -h -n troupe-grow:worker-4) ]] || fail "grow: the refused scale submitted a worker"
"$B" scale --workers 4 --host h2 --job-dir "$work/jobs/grow" > "$work/grow.h2" 2>&1 || fail "grow: scale --host h2: $(cat "$work/grow.h2")"
for _ in $(seq 1 100); do [[ -n $(squeue -h -n troupe-grow:worker-4) ]] && break; sleep 0.1; done
[[ $(squeue -h -n troupe-grow:worker-4 -o %n) == h2 ]] || fail "grow: worker-4 was not placed on h2: $(squeue -h -n troupe-grow:worker-4 -o '%n %N %T')"
"$B" scale --workers 3 --job-dir "$work/jobs/grow" > "$work/grow.scale" 2>&1 || fail "grow: troupe scale: $(cat "$work/grow.scale")"
for _ in $(seq 1 100); do [[ -z $(squeue -h -n troupe-grow:worker-4) ]] && break; sleep 0.1; done
[[ -z $(squeue -h -n troupe-grow:worker-4) ]] || fail "grow: scale-down left worker-4's job queued"
scancel -n troupe-grow:ps-0 || fail "scancel ps-0"
for _ in $(seq 1 600); do grep -q 'restored checkpoint' "$logs/ps-0.log" && break; sleep 0.1; done
grep -q 'restored checkpoint' "$logs/ps-0.log" || fail "grow: ps-0 did not come back from its checkpoint"
scancel -n troupe-grow:master || fail "scancel master"
for _ in $(seq 1 600); do grep -q 'master#1' "$logs/master.log" && break; sleep 0.1; done
for _ in $(seq 1 600); do grep -q 'up at 10.78.0.14' "$logs"/worker-*.log && break; sleep 0.1; done
grep -q 'up at 10.78.0.14' "$logs"/worker-*.log || fail "grow: no worker started on h4 after the other job ended"
wait "$runner" || fail "grow: the job failed"
[[ $(field grow tasks_failed) == 0 ]] || fail "grow: failed tasks: $(result grow)"
grep -q 'master#1' "$logs/master.log" || fail "grow: the master was not resubmitted"
no_jobs_left grow || fail "grow: Slurm jobs left behind (the worker still pending at the end)"
scancel "$other" 2> /dev/null
echo "grow: $(result grow)"

# 4. Bad input: exit 2 naming an unknown partition; exit 1 naming a missing Slurm command or a
#    controller that does not answer. No Slurm jobs.
sed 's/control_partition = "high"/control_partition = "nosuch"/' "$work/plain.toml" > "$work/bad.toml"
"$B" run "$work/bad.toml" --job-id bad > /dev/null 2> "$work/bad.err"
rc=$?
[[ $rc == 2 ]] || fail "unknown partition: exit $rc, expected 2"
grep -q "nosuch" "$work/bad.err" || fail "unknown partition not named: $(cat "$work/bad.err")"
# Refused before any job directory is made (a failed one was left), and by `config check` too.
[[ ! -e "$work/jobs/bad" ]] || fail "unknown partition: a job directory was left: $(ls "$work/jobs/bad")"
"$B" config check "$work/bad.toml" > "$work/bad.check" 2>&1
rc=$?
[[ $rc == 2 ]] || fail "config check of an unknown partition: exit $rc, expected 2: $(cat "$work/bad.check")"
grep -q "cluster.control_partition: Slurm has no partition 'nosuch'" "$work/bad.check" ||
  fail "config check did not name the partition: $(cat "$work/bad.check")"
mkdir -p "$work/empty"
sed "s|launcher = \"slurm\"|launcher = \"slurm\"\nslurm_bin_dir = \"$work/empty\"|" "$work/plain.toml" > "$work/nobin.toml"
"$B" run "$work/nobin.toml" --job-id nobin > /dev/null 2> "$work/nobin.err"
rc=$?
[[ $rc == 1 ]] || fail "no sbatch: exit $rc, expected 1"
grep -qiE "(sinfo|sbatch|scontrol): No such file" "$work/nobin.err" || fail "missing Slurm command not named: $(cat "$work/nobin.err")"
# A worker_host the worker partition lacks: exit 2 naming the key and the host.
job_file badhost 2 20000 'worker_host = "nosuch"'
"$B" run "$work/badhost.toml" --job-id badhost > /dev/null 2> "$work/badhost.err"
rc=$?
[[ $rc == 2 ]] || fail "worker_host nosuch: exit $rc, expected 2"
grep -q "cluster.worker_host: host 'nosuch'" "$work/badhost.err" || fail "worker_host not named: $(cat "$work/badhost.err")"
no_jobs_left bad && no_jobs_left nobin && no_jobs_left badhost || fail "bad input left Slurm jobs"
# slurmctld down at start: exit 1 naming the controller; the cluster is started again after.
stop_controller
"$B" run "$work/plain.toml" --job-id down > /dev/null 2> "$work/down.err"
rc=$?
bash "$S" up > "$work/up2.log" 2>&1 || fail "slurm-cluster.sh up after the controller test"
[[ $rc == 1 ]] || fail "slurmctld down: exit $rc, expected 1"
grep -q "Unable to contact slurm controller" "$work/down.err" || fail "slurmctld down not named: $(cat "$work/down.err")"
echo "PASS"
