# shellcheck shell=bash
# Shared by the `troupe run` tests on the Slurm test cluster (sourced): root check, a work dir on
# /var/tmp (the hosts see this machine's filesystem except /tmp and /dev/shm), the cluster started,
# a DeepFM async-PS job file, result fields, and cleanup of every troupe-* Slurm job on exit.
# Set NAME (work dir) and B (the troupe binary) before sourcing.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S="$here/scripts/slurm-cluster.sh"
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the Slurm test cluster needs root (namespaces, daemons)"; exit 77; fi
work=/var/tmp/troupe-$NAME-$$
cache=/var/tmp/troupe-slurm-datasets
mkdir -p "$work" "$cache"
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.err "$work"/jobs/*.runner.out "$work"/jobs/*/logs/runner.log "$work"/jobs/*/logs/master.log; do
    [[ -f $f ]] && { echo "== $f"; tail -40 "$f"; }
  done
  squeue -a 2> /dev/null
  exit 1
}
our_jobs() { squeue -h -o '%i %j' | awk '$2 ~ /^troupe-/ {print $1}'; }  # Slurm job ids of troupe jobs
cancel_ours() { our_jobs | xargs -r scancel; }
trap 'cancel_ours > /dev/null 2>&1; rm -rf "$work"' EXIT
bash "$S" up > "$work/up.log" 2>&1 || { cat "$work/up.log"; fail "slurm-cluster.sh up"; }

source "$here/tests/common/job_files.sh"
job_file() {  # job_file NAME WORKERS ROWS [CLUSTER_EXTRA]: a DeepFM async-PS job on Slurm
  {
    deepfm_toml "$work" "$cache" "$1" "$2" "$3"
    printf '[cluster]\nlauncher = "slurm"\ncontrol_partition = "high"\nworker_partition = "low"\ncontrol_host = "h1"\n%s\n' "${4:-}"
  } > "$work/$1.toml"
}
result() { tail -1 "$work/$1.out"; }
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<< "$(result "$1")"; }
no_jobs_left() { [[ -z $(squeue -h -o %j | grep "^troupe-$1") ]]; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds (every 0.1 s); false past the deadline.
wait_for() {
  local n=$(($1 * 10))
  shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done
  "$@"
}
trained() { [[ $(grep -l 'first task' "$work/jobs/$1/logs"/worker-*.log 2> /dev/null | wc -l) -ge $2 ]]; }
# A test stopped by ctest's timeout (SIGKILL: no EXIT trap) leaves its Slurm jobs holding the
# hosts' CPUs; the tests run one at a time, so any troupe-* job here is such a leftover.
left=$(our_jobs | tr '\n' ' ')
if [[ -n $left ]]; then
  echo "cancelling Slurm jobs left by an earlier test: $left"
  cancel_ours
  wait_for 30 no_jobs_left "" || echo "still there after 30 s: $(our_jobs | tr '\n' ' ')"
fi
slurm_state="${TROUPE_SLURM_STATE:-/var/lib/troupe-slurm}"  # as scripts/slurm-cluster.sh
ctl_pidfile="$slurm_state/run/slurmctld.pid"
# slurmctld dies (SIGKILL: with jobs running, a SIGTERMed 22.05 slurmctld can hang in its shutdown,
# "agent failed to shutdown gracefully", for minutes); `slurm-cluster.sh up` restarts it from its
# saved state.
# First, slurmctld's saved state must hold every job it accepted: it writes its job state a few
# seconds after a change (longer on a loaded machine), and one SIGKILLed before that forgets its
# newest jobs and, restarted, hands their ids out again (seen on CI: the job's own resubmissions got
# the ids of its running Slurm jobs, and the job never recovered). That is Slurm losing what it had
# acknowledged, not the outage these tests are about. A job update makes it save; the file says when.
ctl_state="$slurm_state/ctld-state/job_state"
state_saved_since() { [[ "$ctl_state" -nt "$1" ]]; }
stop_controller() {
  local p id
  p=$(cat "$ctl_pidfile")
  touch "$work/before-save"
  sleep 0.05  # the save's mtime must be past the marker's
  id=$(our_jobs | head -1)
  # With no job of ours there is nothing for the controller to lose, and nothing to make it save.
  if [[ -n $id ]]; then
    scontrol update JobId="$id" Comment=state-saved > /dev/null 2>&1
    wait_for 60 state_saved_since "$work/before-save" || fail "slurmctld did not save its job state within 60 s"
  fi
  kill -KILL "$p"
  wait_for 10 bash -c "! kill -0 $p 2> /dev/null" || fail "slurmctld $p did not die"
}
# Every worker a Slurm job of its own (2 CPUs: at most two on a host).
slurm_workers='[cluster]
launcher = "slurm"
control_partition = "high"
worker_partition = "low"
control_host = "h1"
worker_cpus = 2'
# alone_and_spread WRITER: the job WRITER writes (`WRITER NAME` on stdout) run twice, on this machine
# alone and with $slurm_workers; both do every record once, the spread one on two hosts or more.
# Sets a and b (their test accuracies, within 0.015), hosts and logs (the spread job's). One run of
# each: CI on 2026-12-04 had 0.855 alone and 0.845 spread (10 runs alone here: 0.8513-0.8548), so
# 0.01 failed a sound job now and then (the tail rounds' full rate, fixed in e436c7d, left runs
# 0.01-0.03 low).
alone_and_spread() {
  local j
  for j in alone spread; do
    { "$1" $j; [[ $j == spread ]] && echo "$slurm_workers"; } > "$work/$j.toml"
    "$B" run "$work/$j.toml" --job-id $j --quiet > "$work/$j.out" 2> "$work/$j.err" || fail "$j: the job failed"
  done
  for j in alone spread; do
    [[ $(field $j records_done) == 240000 && $(field $j tasks_failed) == 0 ]] || fail "$j: $(result $j)"
    # Every launcher ends a job with its model (issue 46), the Slurm one included.
    [[ -f $work/jobs/$j/model/model.pt ]] && grep -q '"from": "final"' "$work/jobs/$j/model/model.json" ||
      fail "$j: no model written from the final state"
  done
  logs=$work/jobs/spread/logs
  hosts=$(grep -ho 'up at [0-9.]*' "$logs"/worker-*.log | sort -u | wc -l)
  [[ $hosts -ge 2 ]] || fail "spread: every worker on one host"
  a=$(field alone test_accuracy) b=$(field spread test_accuracy)
  within "$a" "$b" 0.015 || fail "accuracy on Slurm $b, alone $a: more than 0.015 apart"
}
