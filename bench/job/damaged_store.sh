#!/usr/bin/env bash
# How long a job takes to fail once its record store is damaged while it trains, with and without
# job.max_quarantined_in_a_row: a DeepFM async-PS job (2 workers, 2 shards) over a 300,000-row
# synthetic CTR store cut into 3,000 tasks of 100 records; once 2 tasks are done every page of the
# store past its first tenth is overwritten. Prints one JSON line a limit: the runner's exit code, the
# seconds from the damage to the runner's exit, tasks done / quarantined / left to do, the reason.
# Usage: bench/job/damaged_store.sh TROUPE_BINARY [LIMIT ...]   (default limits: 8 0; 0 = none)
set -uo pipefail
B=$(realpath "$1")
shift
limits=("${@:-8}")
[[ $# -eq 0 ]] && limits=(8 0)
work=/var/tmp/troupe-damaged-store-bench-$$
mkdir -p "$work"
"$B" data synth-ctr --rows 300000 --fields 6 --vocab 50 --seed 1 --out "$work/store" > /dev/null || exit 1
"$B" data synth-ctr --rows 5000 --fields 6 --vocab 50 --seed 2 --out "$work/test" > /dev/null || exit 1
field() { /usr/bin/python3 -c "import json, sys; j = json.load(sys.stdin); print($1)" 2> /dev/null; }
for limit in "${limits[@]}"; do
  name=limit$limit
  rm -rf "$work/train-$name" && cp -r "$work/store" "$work/train-$name"
  cat > "$work/$name.toml" << TOML
[job]
name = "$name"
root = "$work/jobs"
dataset_cache = "$work/cache"
strategy = "async_ps"
workers = 2
max_workers = 2
records_per_task = 100
max_quarantined_in_a_row = $limit
[ps]
shards = 2
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = 1
batch_size = 100
optimizer = "adam"
learning_rate = 0.01
[data]
source = "store"
train = "$work/train-$name"
test = "$work/test"
TOML
  "$B" run "$work/$name.toml" --job-id "$name" > "$work/$name.out" 2> "$work/$name.err" &
  runner=$!
  dir=$work/jobs/$name
  until [[ $("$B" status --json --job-dir "$dir" 2> /dev/null | field 'j["tasks"]["done"]') -ge 2 ]] 2> /dev/null; do
    kill -0 $runner 2> /dev/null || break
    sleep 0.2
  done
  # The store the workers read: the cache's copy when the runner made one, else the store itself.
  mdb=$(find "$work/cache" -path "*train*/data.mdb" 2> /dev/null | head -1)
  [[ -n $mdb ]] || mdb=$work/train-$name/data.mdb
  /usr/bin/python3 - "$mdb" << 'PY'
import os, sys
p = sys.argv[1]
size = os.path.getsize(p)
with open(p, "r+b") as f:
    at = max(2 * 4096, size // 10 // 4096 * 4096)
    while at < size:
        f.seek(at)
        f.write(b"\xa5" * 4096)
        at += 4096
PY
  t0=$(date +%s.%N)
  wait $runner
  rc=$?
  t1=$(date +%s.%N)
  rm -rf "$work/cache"
  /usr/bin/python3 - "$limit" "$rc" "$t0" "$t1" "$(tail -1 "$work/$name.out")" << 'PY'
import json, sys
limit, rc, t0, t1, line = sys.argv[1:]
try:
    r = json.loads(line)
except ValueError:
    r = {}
print(json.dumps({"max_quarantined_in_a_row": int(limit), "rc": int(rc),
                  "seconds_after_damage": round(float(t1) - float(t0), 1),
                  "tasks_done": r.get("tasks_done"), "tasks_failed": r.get("tasks_failed"),
                  "tasks_todo": (r.get("tasks") or {}).get("todo"), "reason": r.get("reason", "")[:160]}))
PY
done
echo "work: $work"
