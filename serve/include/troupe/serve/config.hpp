// `troupe serve`'s settings: the [serve] section of a config file in the job file's style (its
// [cluster] section picks the launcher that runs the replicas, [transport] the front end's link to
// them), then flags. Read once, validated once; errors name the file and the key.
//
//   [serve]
//   model = "jobs/7f3a/model"     # the model directory (MODEL_DIR on the command line wins)
//   name = ""                     # the model's name in the URLs; "": model.json's model type
//   root = "jobs"                 # the jobs root: state under <root>/serve/<name>/
//   replicas = 1                  # model replicas (processes)
//   threads = 1                   # libtorch's intra-op threads per replica
//   pin_cpus = false              # replica slot s on CPUs [s*threads, (s+1)*threads) (mod the CPUs)
//   device = "cpu"                # where the replicas run the model: "cpu", "cuda", "cuda:1"
//   listen = "127.0.0.1:8000"     # the HTTP endpoint (port 0: any free one)
//   http_threads = 2              # the HTTP server's threads (parse and encode JSON)
//   max_batch = 64                # rows per batch; also the most rows one request may carry
//   max_delay_us = 0              # how long a batch waits for more rows while a replica is free
//   max_queue_rows = 4096         # rows waiting for a replica; past it: 503 with Retry-After
//   pipeline = 2                  # batches in flight per replica
//   request_timeout_ms = 30000    # a request still queued after this: 504
//   replica_timeout_ms = 10000    # a batch unanswered this long: its replica is fenced, the batch retried
//   max_attempts = 3              # replicas a request may be sent to before it fails (503)
//   max_body_bytes = 8388608      # larger bodies: 413
//   max_connections = 1024        # more: 503 at once
//   read_timeout_ms = 5000        # a client that takes longer to send its request is closed
//   drain_ms = 0                  # after SIGTERM: readiness 503 this long, requests still served
//   access_log = false            # a line per HTTP request in <state>/logs/access.log
//   warmup = 20                   # warm-up forwards per size after a replica loads its model
//   load_timeout_ms = 120000      # a replica not ready this long after its launch has failed
//   watch = ""                    # a directory to watch for newer models ("jobs": every job's model/)
//   watch_interval_ms = 1000
//   progress = true               # the progress line on stderr
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "troupe/cluster/config.hpp"
#include "troupe/core/config.hpp"
#include "troupe/transport/config.hpp"

namespace troupe::serve {

struct serve_config {
  std::string model;
  std::string name;
  std::string root = "jobs";
  std::size_t replicas = 1;
  int threads = 1;
  bool pin_cpus = false;
  std::string device = "cpu";
  std::string listen = "127.0.0.1:8000";
  std::size_t http_threads = 2;
  std::size_t max_batch = 64;
  std::chrono::microseconds max_delay{0};
  std::size_t max_queue_rows = 4096;
  std::size_t pipeline = 2;
  std::chrono::milliseconds request_timeout{30'000};
  std::chrono::milliseconds replica_timeout{10'000};
  int max_attempts = 3;
  std::size_t max_body_bytes = 8u << 20;
  std::size_t max_connections = 1024;
  std::chrono::milliseconds read_timeout{5'000};
  std::chrono::milliseconds drain{0};
  bool access_log = false;
  int warmup = 20;
  std::chrono::milliseconds load_timeout{120'000};
  std::string watch;
  std::chrono::milliseconds watch_interval{1'000};
  bool progress = true;

  // Reads the keys above from `s` over `defaults`; problems are recorded in the reader.
  static serve_config read(config_section s, serve_config defaults);
  static serve_config read(config_section s);
};

// Everything `troupe serve` runs with: the file's three sections.
struct serve_settings {
  serve_config serve;
  cluster::cluster_config cluster;
  transport_config transport;
};

// Reads [serve], [cluster] and [transport] of `doc` (the other sections are refused as unknown:
// this is not a job file). Errors name the file and the key.
expected<serve_settings> read_settings(const config_doc& doc);

// A model name usable in URLs and as a directory: 1-64 of [A-Za-z0-9_.-], not starting with '.'.
bool valid_model_name(std::string_view name) noexcept;

}  // namespace troupe::serve
