#!/usr/bin/env bash
# What an interrupted async_ps job's export is worth with and without its workers' buffers
# (docs/job.md, "An async_ps worker's buffers"): a batch-norm MLP (784-16-BN-10) trains on 20,000
# Fashion-MNIST rows, 3 epochs, 2 workers paced at 4,000 samples/s; its runner is SIGKILLed once
# KILL_AT tasks of 60 are done; the job directory is copied and the copy's checkpoints/buffers
# removed (what every async_ps job had before 2026-12-04); both are exported and evaluated on the
# test store. Prints one line per kill point and job.
# Usage: bench/model/ps_buffers_export.sh TROUPE_BINARY [KILL_AT...]   (default: 20 40 56)
set -euo pipefail
T=$(realpath "$1"); shift
if [[ $# -gt 0 ]]; then points=("$@"); else points=(20 40 56); fi
w=$(mktemp -d /tmp/ps-buffers-XXXXXX)
trap 'rm -rf "$w"' EXIT
/usr/bin/python3 - "$w/normed.pt" <<'PY'
import sys, torch
from torch import nn
torch.manual_seed(1)
torch.jit.script(nn.Sequential(nn.Linear(784, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))).save(sys.argv[1])
PY
cat > "$w/bn.toml" <<TOML
[job]
name = "bn"
strategy = "async_ps"
workers = 2
records_per_task = 1000
root = "$w/jobs"
dataset_cache = "${TROUPE_DATASET_CACHE:-/tmp/troupe-test-datasets}"
[model]
type = "torchscript"
path = "$w/normed.pt"
[train]
epochs = 3
batch_size = 64
optimizer = "adam"
learning_rate = 0.002
max_samples_per_s = 4000
[data]
source = "fashion-mnist"
max_train_rows = 20000
max_test_rows = 5000
TOML
done_tasks() {
  "$T" status --job-dir "$w/jobs/$1" --json 2> /dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['tasks']['done'])" 2> /dev/null || echo 0
}
for at in "${points[@]}"; do
  id=k$at
  "$T" run "$w/bn.toml" --job-id "$id" > "$w/$id.out" 2>&1 &
  pid=$!
  d=0
  for _ in $(seq 1 600); do
    sleep 0.2
    d=$(done_tasks "$id")
    ((d >= at)) && break
  done
  kill -9 "$pid"
  wait "$pid" 2> /dev/null || true
  sleep 4  # the nodes notice their runner is gone and exit
  cp -a "$w/jobs/$id" "$w/jobs/$id-none"
  rm -rf "$w/jobs/$id-none/checkpoints/buffers"
  test=$(sed -n 's/.* --test \([^ ]*\) .*/\1/p' "$w/jobs/$id/logs/"worker-0.log | head -1)
  for j in "$id" "$id-none"; do
    "$T" export "$w/jobs/$j" --out "$w/m-$j" > /dev/null 2>&1
    "$T" evaluate "$w/m-$j" --data "$test" --quiet 2> /dev/null | tail -1 |
      python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('killed at %s tasks done, %-28s accuracy %.4f loss %.4f' % (sys.argv[1], sys.argv[2], r['accuracy'], r['loss']))" \
        "$d" "$([[ $j == *-none ]] && echo 'without its buffers:' || echo 'with its workers buffers:')"
  done
done
