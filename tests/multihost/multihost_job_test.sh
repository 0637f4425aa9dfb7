#!/usr/bin/env bash
# One job across hosts through the local launcher's host list (scripts/hosts.sh namespaces): the
# runner and the master here on the bridge's address, PS shards and workers on h1..h3 through
# `hosts.sh exec {host}` ([cluster] hosts, host_command, advertise). A DeepFM async-PS job finishes
# with every task done and an AUC within 0.01 of the same job on this machine alone, so does an MLP
# allreduce job (accuracy within 0.02) whose ring mixes shm and TCP links (2 workers on each of 2 hosts); then host h3
# is killed mid-job (every process in it) and host h2 is cut off for 5 s and healed: the job
# finishes, nothing lost, the nodes of those hosts come back as new incarnations.
# Usage: multihost_job_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
S="$here/scripts/hosts.sh"
B=$(realpath "$1")
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: hosts.sh needs root (network and mount namespaces)"; exit 77; fi
# The hosts see /var/tmp (their /tmp is their own): jobs and datasets live there.
work=/var/tmp/troupe-multihost-job-$$
cache=/var/tmp/troupe-multihost-datasets
mkdir -p "$work" "$cache"
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.err "$work"/jobs/*/logs/master.log; do [[ -f $f ]] && { echo "== $f"; tail -40 "$f"; }; done
  exit 1
}
trap '"$S" down > /dev/null 2>&1; rm -rf "$work"' EXIT
"$S" up 3 > /dev/null || fail "hosts up"
bridge=$("$S" addr h1 | sed 's/\.[0-9]*$/.1/')

source "$here/tests/common/job_files.sh"
job_file() {  # job_file NAME HOSTS?(1/0) ROWS: a DeepFM async-PS job of 3 workers
  deepfm_toml "$work" "$cache" "$1" 3 "$3" > "$work/$1.toml"
  if [[ $2 == 1 ]]; then
    cat >> "$work/$1.toml" << TOML
[cluster]
hosts = ["h1:2", "h2:2", "h3:2"]
host_command = "$S exec {host}"
advertise = "$bridge"
TOML
  fi
}
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$work/$1.out" | tail -1; }
logs() { echo "$work/jobs/$1/logs"; }
run() {  # run NAME: runs the job in the background ($runner)
  "$B" run "$work/$1.toml" --job-id "$1" > "$work/$1.out" 2> "$work/$1.err" &
  runner=$!
}
wait_tasks() {  # wait_tasks NAME N: N tasks done (troupe status)
  for _ in $(seq 1 600); do
    local d
    d=$("$B" status --json --job-dir "$work/jobs/$1" 2> /dev/null | sed -n 's/.*"done":\([0-9]*\).*/\1/p' | head -1)
    [[ -n $d && $d -ge $2 ]] && return 0
    sleep 0.1
  done
  fail "$1: $2 tasks were not done in time"
}
finished() {  # finished NAME RECORDS: the job ended well, every record of every epoch done
  wait "$runner" || fail "$1: the job failed (exit $?)"
  [[ $(field "$1" tasks_failed) == 0 ]] || fail "$1: failed tasks"
  [[ $(field "$1" records_done) == "$2" ]] || fail "$1: records_done $(field "$1" records_done), expected $2"
}

# 1. The same DeepFM job alone and across hosts.
job_file alone 0 150000
run alone
finished alone 300000
job_file spread 1 150000
run spread
finished spread 300000
for h in h1 h2 h3; do
  grep -lq "up at $("$S" addr $h):" "$(logs spread)"/worker-*.log "$(logs spread)"/ps-*.log ||
    fail "spread: no node ran on $h"
done
grep -q "master#0 (master) up at $bridge:" "$(logs spread)/master.log" || fail "spread: the master is not on $bridge"
a=$(field alone test_auc) b=$(field spread test_auc)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  fail "AUC across hosts $b, alone $a: more than 0.01 apart"
echo "alone: auc $a; across 3 hosts: auc $b"

# 2. An MLP allreduce job, 4 workers on h1 and h2 (2 each): one ring mixes shared-memory links
#    inside a host and TCP links across, and trains like the same job on this machine alone.
mlp_file() {  # mlp_file NAME HOSTS?(1/0)
  mlp_toml "$work" "$cache" "$1" > "$work/$1.toml"
  if [[ $2 == 1 ]]; then
    cat >> "$work/$1.toml" << TOML
[cluster]
hosts = ["h1:2", "h2:2"]
host_command = "$S exec {host}"
advertise = "$bridge"
TOML
  fi
}
mlp_file mlp-alone 0
run mlp-alone
finished mlp-alone 240000
mlp_file mlp-spread 1
run mlp-spread
finished mlp-spread 240000
for h in h1 h2; do
  [[ $(grep -l "up at $("$S" addr $h):" "$(logs mlp-spread)"/worker-*.log | wc -l) == 2 ]] ||
    fail "mlp-spread: not 2 workers on $h"
done
grep -q "(shm and TCP), linked" "$(logs mlp-spread)"/worker-0.log || fail "mlp-spread: the ring of worker-0 is not mixed"
a=$(field mlp-alone test_accuracy) b=$(field mlp-spread test_accuracy)
# Within 0.02, not 0.01: the tasks meeting in a step vary between runs of an elastic allreduce job,
# and the same job alone scores 0.8485-0.8562 under load (tests/common/job_files.sh, mlp_toml).
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02) }' ||
  fail "MLP accuracy across hosts $b, alone $a: more than 0.02 apart"
echo "MLP allreduce alone: accuracy $a; 4 workers on 2 hosts (mixed ring): $b"

# 3. Host h3 dies (every process in it SIGKILLed), then h2 is cut off for 5 s: the job finishes.
job_file faults 1 1500000
run faults
wait_tasks faults 40
victims=$(grep -l "up at $("$S" addr h3):" "$(logs faults)"/*.log | xargs -n1 basename | sed 's/\.log$//')
[[ -n $victims ]] || fail "faults: nothing ran on h3"
"$S" kill h3
wait_tasks faults 120
cut_off=$(grep -l "up at $("$S" addr h2):" "$(logs faults)"/*.log | xargs -n1 basename | sed 's/\.log$//')
[[ -n $cut_off ]] || fail "faults: nothing ran on h2"
"$S" cut h2
sleep 5
"$S" heal h2
finished faults 3000000
for v in $victims $cut_off; do
  grep -q "$v#[1-9][0-9]* (" "$(logs faults)/$v.log" || fail "faults: $v (on h3 or h2) did not come back"
done
grep -E "(h2|h3|$(echo $victims $cut_off | tr ' ' '|'))#0 down" "$(logs faults)/master.log" | cut -c1-160
echo "faults: $(tail -1 "$work/faults.out")"
echo "multihost_job_test: ok"
