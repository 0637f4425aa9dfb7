// The [cluster] section of a job file and the launcher it selects. `troupe run` reads it with the
// rest of the job file (an unknown key or a bad value is the usual error naming file and key) and
// starts every node through make_launcher(). (Where job directories go is [job] root.)
//
//   [cluster]
//   launcher = "local"            # backend; only "local" so far
//   capacity_cpus = 0.0           # 0: detect (local_capacity); else the cores nodes may reserve
//   capacity_memory_mb = 0        # 0: detect
//   capacity_gpus = -1            # -1: detect; else the GPUs nodes may reserve
//   metrics_host = "127.0.0.1"    # where the master serves Prometheus /metrics (docs/observe.md);
//   metrics_port = 0              # 0: a free port the runner picks (in nodes.json); -1: no /metrics
#pragma once

#include <memory>
#include <string>

#include "troupe/cluster/launcher.hpp"
#include "troupe/core/config.hpp"

namespace troupe::cluster {

struct cluster_config {
  std::string launcher = "local";
  double capacity_cpus = 0;
  std::int64_t capacity_memory_mb = 0;
  std::int64_t capacity_gpus = -1;
  std::string metrics_host = "127.0.0.1";
  std::int64_t metrics_port = 0;

  // Reads the keys above from `s`; problems are recorded in the reader (see config.hpp).
  static cluster_config read(config_section s, cluster_config defaults);
  static cluster_config read(config_section s);
};

// The capacity the config asks for: detected fields where it says "detect". Errors: io_error
// from local_capacity().
expected<resources> configured_capacity(const cluster_config& cfg);

// The launcher backend the config names, with its capacity. Errors: invalid_spec for an unknown
// backend, or the backend's own creation errors.
expected<std::unique_ptr<launcher>> make_launcher(const cluster_config& cfg, exit_callback on_exit);

}  // namespace troupe::cluster
