#!/usr/bin/env bash
# A user's PyTorch module (TorchScript, docs/models.md) trained across hosts (scripts/hosts.sh
# namespaces): the MLP allreduce job of multihost_job_test.sh with the same MLP written in PyTorch,
# 4 workers on h1 and h2 (2 each, a ring of shm and TCP links), each loading the TorchScript plugin
# and the module from a directory every host sees. It finishes with every record done, worker-1 is
# SIGKILLed mid-job on its host and replaced, and the accuracy is that of the job on this machine
# alone (within 0.01). Usage: torch_hosts_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=torch-hosts HOSTS=2 FAIL_LOGS='jobs/*/logs/worker-1.log'
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
torch_mlp_module "$work/mlp.pt" || fail "scripting the module"
job_file() {  # job_file NAME HOSTS?(1/0)
  { torch_mlp_toml "$work" "$cache" "$1" "$work/mlp.pt"; [[ $2 == 1 ]] && hosts_section h1:2 h2:2; } > "$work/$1.toml"
}
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$work/$1.out" | tail -1; }
job_file alone 0
"$B" run "$work/alone.toml" --job-id alone > "$work/alone.out" 2> "$work/alone.err" || fail "alone: the job failed"
job_file spread 1
"$B" run "$work/spread.toml" --job-id spread > "$work/spread.out" 2> "$work/spread.err" &
runner=$!
logs=$work/jobs/spread/logs
for _ in $(seq 1 1200); do
  d=$("$B" status --json --job-dir "$work/jobs/spread" 2> /dev/null | sed -n 's/.*"done":\([0-9]*\).*/\1/p' | head -1)
  [[ -n $d && $d -ge 60 ]] && break
  sleep 0.1
done
[[ -n ${d:-} && $d -ge 60 ]] || fail "spread: 60 tasks were not done in time"
pid=$(sed -n 's/.*"name":"worker-1"[^}]*"pid":\([0-9]*\).*/\1/p' "$work/jobs/spread/nodes.json" | head -1)
[[ -n $pid ]] || pid=$(/usr/bin/python3 -c "import json,sys; print(next(n['pid'] for n in json.load(open(sys.argv[1]))['nodes'] if n['name']=='worker-1' and n['state']!='exited'))" "$work/jobs/spread/nodes.json")
kill -KILL "$pid" || fail "spread: no worker-1 to kill"
wait "$runner" || fail "spread: the job failed after the kill"
[[ $(field spread records_done) == 240000 ]] || fail "spread: records_done $(field spread records_done), expected 240000"
[[ $(field spread tasks_failed) == 0 ]] || fail "spread: failed tasks"
(($(field spread node_restarts) >= 1)) || fail "spread: worker-1 was not replaced"
for h in h1 h2; do
  [[ $(grep -l "up at $("$S" addr $h):" "$logs"/worker-*.log | wc -l) -ge 2 ]] || fail "spread: not 2 workers on $h"
done
grep -q "TorchScript plugin: .* loaded" "$logs/worker-0.log" || fail "spread: worker-0 did not load the plugin"
a=$(field alone test_accuracy) b=$(field spread test_accuracy)
within "$a" "$b" 0.01 ||
  fail "accuracy across hosts $b, alone $a: more than 0.01 apart"
echo "PASS: TorchScript MLP alone: accuracy $a; 4 workers on 2 hosts, worker-1 SIGKILLed: $b"
