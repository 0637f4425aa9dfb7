# shellcheck shell=bash
# deepfm_toml ROOT CACHE NAME WORKERS ROWS: the DeepFM async-PS job the multi-host and Slurm tests
# run (synthetic CTR data, 2 PS shards checkpointing every 500 ms, 2 epochs), on stdout, without a
# [cluster] section. Sourced.
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
