#pragma once

namespace troupe::actors::bench {

// The job ps_bench's shard and clients (and tests/actors/ps_window_test.cpp) build their model from:
// DeepFM with 16-float (64-byte) embedding rows, Adam, one shard, periodic checkpoints effectively
// off (one an hour). 6 fields of 166667 ids: the data's id space holds the bench's key space of 1M
// (a shard refuses ids past the data's).
inline constexpr const char* ps_bench_job = R"(
[job]
strategy = "async_ps"
name = "ps-bench"
[ps]
shards = 1
checkpoint_every_ms = 3600000
[model]
type = "deepfm"
embedding_dim = 16
hidden = [32]
[train]
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = 2048
test_rows = 1024
fields = 6
vocab_per_field = 166667
)";

}  // namespace troupe::actors::bench
