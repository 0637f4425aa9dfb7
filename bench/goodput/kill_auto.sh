#!/usr/bin/env bash
# A batch = "auto" job (AdaScale, SGD) that loses a worker: the Fashion-MNIST MLP (256, 128), 2
# allreduce workers of 64 (M0 = 128), 8 epochs, tasks of 2,000 records; worker-1 is SIGKILLed
# 2.5 s into training (the runner replaces it). Per run one JSON line: the batch choices of the
# timeline (global batch each), the largest, the largest learning-rate factor the metrics events
# show, and the test accuracy. A choice made on the estimate's first rounds after the resize went to
# max_batch (16 x M0 = 2048) with the rate x16.
# Usage: bench/goodput/kill_auto.sh TROUPE_BINARY [RUNS]   (default 3)
set -uo pipefail
B=$(realpath "$1")
runs=${2:-3}
work=/var/tmp/troupe-kill-auto-$$
mkdir -p "$work"
cat > "$work/job.toml" << TOML
[job]
strategy = "allreduce"
root = "$work/jobs"
dataset_cache = "$work/datasets"
workers = 2
min_workers = 1
max_workers = 4
records_per_task = 2000
[model]
type = "mlp"
hidden = [256, 128]
[train]
epochs = 8
batch_size = 64
optimizer = "sgd"
learning_rate = 0.05
seed = 1
lr_scaling = "adascale"
batch = "auto"
[data]
source = "fashion-mnist"
dir = "/usr/share/datasets/fashion-mnist"
TOML
for i in $(seq 1 "$runs"); do
  id=kill$i
  "$B" run --quiet --job-id "$id" "$work/job.toml" > "$work/$id.out" 2> "$work/$id.err" &
  runner=$!
  dir=$work/jobs/$id
  until [[ -f $dir/nodes.json ]] && "$B" status --json --job-dir "$dir" 2> /dev/null | grep -q '"samples_total": *[1-9]'; do
    kill -0 $runner 2> /dev/null || break
    sleep 0.1
  done
  sleep 2.5
  pid=$(/usr/bin/python3 -c "import json,sys; n=json.load(open('$dir/nodes.json')); print(next((x.get('pid',0) for x in (n.get('nodes',n) if isinstance(n,dict) else n) if str(x.get('id',x.get('name',''))).startswith('worker-1')),0))" 2> /dev/null)
  [[ -n $pid && $pid != 0 ]] && kill -9 "$pid"
  wait $runner
  /usr/bin/python3 - "$dir" "$pid" << 'PY'
import json, sys
d, pid = sys.argv[1], sys.argv[2]
batches, factors, seen = [], [], []
for line in open(d + "/events.jsonl"):
    e = json.loads(line)
    if e.get("kind") == "batch":
        batches.append(e.get("batch"))
        seen.append(e.get("from", 0))  # a choice replaced within one interval shows only as "from"
    if e.get("kind") == "metrics":
        seen.append(e.get("batch", 0))
    g = e.get("goodput") or {}
    if isinstance(g, dict) and "lr_factor" in g:
        factors.append(g["lr_factor"])
    elif "lr_factor" in e:
        factors.append(e["lr_factor"])
r = json.load(open(d + "/result.json"))
print(json.dumps({"killed_pid": int(pid or 0), "choices": batches, "largest_batch": max(batches + seen or [0]),
                  "largest_lr_factor": round(max(factors or [0]), 2),
                  "test_accuracy": r.get("accuracy", r.get("test_accuracy")), "status": r.get("status")}))
PY
done
echo "work: $work"
