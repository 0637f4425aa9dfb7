# shellcheck shell=bash
# The job files the multi-host and Slurm tests run, on stdout, without a [cluster] section, and the
# checks on their results. Sourced.

# deepfm_toml ROOT CACHE NAME WORKERS ROWS: a DeepFM async-PS job (synthetic CTR data, 2 PS shards
# checkpointing every 500 ms, 2 epochs).
deepfm_toml() {
  cat << TOML
[job]
root = "$1/jobs"
dataset_cache = "$2"
strategy = "async_ps"
name = "$3"
workers = $4
min_workers = 1
max_workers = 8
records_per_task = 1024
[ps]
shards = 2
checkpoint_every_ms = 500
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = 2
batch_size = 128
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = $5
test_rows = 10000
fields = 6
vocab_per_field = 50
TOML
}

# mlp_toml ROOT CACHE NAME: an MLP allreduce job of 4 workers (Fashion-MNIST, 4 epochs, 10000 test
# rows). Alone or across hosts, 32 runs on a loaded 2-core machine scored 0.8489-0.8563 (since rounds
# with idle ranks step at their share of the learning rate; before, 1 run in 3 to 5 ended 0.01-0.03
# low: docs/strategies.md).
mlp_toml() {
  cat << TOML
[job]
root = "$1/jobs"
dataset_cache = "$2"
strategy = "allreduce"
name = "$3"
workers = 4
records_per_task = 500
[model]
type = "mlp"
hidden = [64]
[train]
epochs = 4
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
[data]
source = "fashion-mnist"
max_test_rows = 10000
TOML
}

# torch_mlp_module OUT: the MLP of mlp_toml written in PyTorch (784-64-10), scripted and saved to OUT.
torch_mlp_module() {
  /usr/bin/python3 - "$1" << 'PY'
import sys, torch
from torch import nn
torch.manual_seed(1)
torch.jit.script(nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))).save(sys.argv[1])
PY
}

# torch_mlp_toml ROOT CACHE NAME MODULE: mlp_toml's job with the TorchScript module MODULE as its model.
torch_mlp_toml() {
  mlp_toml "$1" "$2" "$3" | sed "s|^type = \"mlp\"|type = \"torchscript\"\npath = \"$4\"|; /^hidden = /d"
}

# within A B TOLERANCE: |A - B| <= TOLERANCE.
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }

# done_tasks BINARY JOB_DIR: the job's DONE tasks (`troupe status`); empty while it cannot say.
done_tasks() {
  "$1" status --json --job-dir "$2" 2> /dev/null |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["tasks"]["done"])' 2> /dev/null
}

# wait_done_tasks BINARY JOB_DIR N INTERVAL: polls (1,200 times at most, INTERVAL seconds apart)
# until the job has N tasks done; fails past that.
wait_done_tasks() {
  local d
  for _ in $(seq 1 1200); do
    d=$(done_tasks "$1" "$2")
    [[ -n $d && $d -ge $3 ]] && return 0
    sleep "$4"
  done
  return 1
}
