#!/usr/bin/env bash
# Steps trained twice when a worker is SIGKILLed partway through a task: the MLP job of
# model_export.a_worker_killed_mid_task_costs_only_the_rows_no_survivor_holds (12,000 Fashion-MNIST
# rows in 4 tasks of 3,000, batches of 64, 2 workers at most 2,000 rows/s each: 4 x 47 steps when
# nothing is killed), N runs per strategy (allreduce, async_ps). Each run waits until a task is done,
# sleeps 0.9 s (about 1.1 s into the second round of tasks, each ~1.5 s), SIGKILLs worker-1, lets
# the job finish, counts the trained steps (TROUPE_STEP_LOG, every incarnation) and prints one JSON
# line: the steps trained again (all of them less 188), the killed worker's steps, and the rows of
# its task kept at its death (the timeline's requeue: 0 when the task went back whole). Then per
# strategy the median and range of the steps trained again.
# Usage: bench/job/kill_mid_task.sh TROUPE_BINARY N [PROGRESS_EVERY_MS (500)]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
source "$here/tests/common/job_files.sh"
B=$(realpath "$1")
n=$2
every=${3:-500}
work=/var/tmp/troupe-kill-mid-task-$$
mkdir -p "$work/jobs"
for strategy in allreduce async_ps; do
  again=()
  for i in $(seq 1 "$n"); do
    name=$strategy$i
    cat > "$work/$name.toml" << TOML
[job]
strategy = "$strategy"
workers = 2
records_per_task = 3000
progress_every_ms = $every
[model]
type = "mlp"
hidden = [64]
[train]
epochs = 1
batch_size = 64
optimizer = "adam"
learning_rate = 0.002
max_samples_per_s = 2000
[data]
source = "fashion-mnist"
max_train_rows = 12000
max_test_rows = 1000
TOML
    dir=$work/jobs/$name
    mkdir -p "$work/steps/$name"
    TROUPE_STEP_LOG=$work/steps/$name "$B" run "$work/$name.toml" --root "$work/jobs" --job-id "$name" --quiet \
      > "$work/$name.out" 2> "$work/$name.err" &
    pid=$!
    wait_done_tasks "$B" "$dir" 1 0.05
    sleep 0.9
    victim=$(/usr/bin/python3 -c '
import json, sys
for n in json.load(open(sys.argv[1]))["nodes"]:
    if n.get("name") == "worker-1" and n.get("state", "running") == "running": print(n["pid"])' "$dir/nodes.json" | head -1)
    kill -9 "$victim"
    wait "$pid"
    rc=$?
    total=$(cat "$work/steps/$name"/*.steps | grep -c .)
    killed=$(grep -c . "$work/steps/$name/worker-1#0.steps")
    kept=$(grep '"kind":"requeue"' "$dir/events.jsonl" | grep -o 'task [0-9]* with [0-9]* rows trained kept' |
      head -1 | awk '{print $4}')
    again+=($((total - 188)))
    printf '{"strategy": "%s", "run": %d, "exit_code": %d, "progress_every_ms": %d, "steps": %d, "trained_again": %d, "killed_worker_steps": %d, "rows_kept": %d}\n' \
      "$strategy" "$i" "$rc" "$every" "$total" "$((total - 188))" "$killed" "${kept:-0}"
  done
  printf '%s\n' "${again[@]}" | /usr/bin/python3 -c '
import json, statistics, sys
a = [int(x) for x in sys.stdin.read().split()]
print(json.dumps({"strategy": sys.argv[1], "runs": len(a), "trained_again_median": statistics.median(a),
                  "min": min(a), "max": max(a), "work": sys.argv[2]}))' "$strategy" "$work"
done
