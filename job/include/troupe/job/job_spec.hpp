// The whole job file of `troupe run`: the sections nn owns ([model], [train], [data]), the
// transport's ([transport]), the launcher's ([cluster], cluster/config.hpp), logging ([log]) and
// the job's own:
//
//   [job]  name, root = "jobs", strategy = "async_ps" | "allreduce" | "local_sgd",
//          workers (initial target), min_workers, max_workers, records_per_task,
//          max_task_failures, max_quarantined_in_a_row, lease_timeout_ms, progress_every_ms,
//          sync_every (local_sgd), checkpoint_every_ms, ring_capacity_kb (allreduce rings), ring_lanes
//          (threads per worker for a large allreduce on one host; 0: its CPUs over its host's workers, 1-4),
//          rpc_timeout_ms, dataset_cache (dir of imported datasets, default "<root>/datasets"), device =
//          "cpu" | "gpu" (workers train on a GPU, the CUDA trainer backend; docs/gpu_workers.md),
//          disk_full_timeout_ms (a disk fault lasting this long fails the job; 300000)
//   [ps]   shards, checkpoint_every_ms, full_checkpoint_every, checkpoint_dir, in_flight_pushes,
//          prefetch
//
// train.epochs is the number of passes over the dataset the dispenser hands out.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "troupe/cluster/config.hpp"
#include "troupe/core/config.hpp"
#include "troupe/core/log.hpp"
#include "troupe/job/strategy_traits.hpp"
#include "troupe/nn/config.hpp"
#include "troupe/transport/config.hpp"

namespace troupe::job {

struct job_options {
  using ms = std::chrono::milliseconds;
  std::string name = "job";
  std::string root = "jobs";
  std::string strategy = "async_ps";
  std::uint32_t workers = 2, min_workers = 1, max_workers = 8;
  std::uint64_t records_per_task = 1024;
  std::uint32_t max_task_failures = 3;
  // This many tasks quarantined one after another, none finished between them (a damaged store, a
  // model that fails every step), ends the job: the dispenser hands out no more tasks (those left
  // stay TODO for --resume). 0: every task is tried first.
  std::uint32_t max_quarantined_in_a_row = 8;
  ms lease_timeout{30'000};
  ms progress_every{500};
  std::uint32_t sync_every = 8;
  std::uint32_t ring_lanes = 0;          // 0: by the host's CPUs (collective::session_lanes)
  std::size_t ring_capacity = 4u << 20;  // holds a resync of a mid-sized model: its source does not wait
  ms rpc_timeout{10'000};
  std::string dataset_cache;   // empty: <root>/datasets
  std::string device = "cpu";  // "gpu": workers train on the CUDA backend (one device per worker)
  // A disk fault (no space left, I/O error) on the job's files lasting this long fails the job;
  // shorter ones pause it (docs/job.md, "Failure table").
  ms disk_full_timeout{300'000};
  // Ring strategies (allreduce, local_sgd): how often one worker writes the replica (parameters,
  // buffers, optimizer state) to <job dir>/checkpoints/ring; 0: never (PS jobs: [ps] checkpoint_every_ms).
  ms checkpoint_every{10'000};
};

struct ps_options {
  std::uint32_t shards = 1;
  std::chrono::milliseconds checkpoint_every{2'000};
  std::uint32_t full_checkpoint_every = 10;
  std::string checkpoint_dir;  // absolute; empty: <job dir>/checkpoints (checkpoints_of says where)
  // A worker's requests in flight (docs/job.md, "PS requests in flight"): pushes not acknowledged
  // yet (0: each push waits for its reply), and whether the next batch's rows are pulled while the
  // current batch trains.
  std::uint32_t in_flight_pushes = 2;
  bool prefetch = true;
  bool operator==(const ps_options&) const = default;
  // Where the shards' checkpoints (ps-<i>/) of the job in `job_dir` are: <job dir>/checkpoints, or
  // <checkpoint_dir>/<job id> (one directory for many jobs: each job's own; a new job took up
  // another's checkpoints and trained on from its weights as if from scratch).
  std::string checkpoints_of(const std::string& job_dir) const;
  // <checkpoint_dir>/<the job's id>, the job's own directory there ("" without a checkpoint_dir);
  // checkpoints_of reads an earlier layout's when the job has none.
  std::string own_checkpoints(const std::string& job_dir) const;
};

struct job_spec {
  job_options job;
  ps_options ps;
  nn::job_config nn;
  transport_config transport;
  cluster::cluster_config cluster;
  log_config log;

  // Reads every section; the first problem (or an unknown key) is the error, naming file and key.
  // `effective`, when given, receives the document with every key read set to its value, defaults
  // included (config_reader::effective).
  static expected<job_spec> read(const config_doc& doc, config_doc* effective = nullptr);
  // What the job knows of its strategy (strategy_traits.hpp; defaults for an unknown name).
  strategy_traits traits() const;
  // Whether the strategy keeps its parameters on PS shards (async_ps) or on the workers.
  bool uses_ps() const;
  bool uses_gpu() const { return job.device == "gpu"; }
};

}  // namespace troupe::job
