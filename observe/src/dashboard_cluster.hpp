// /api/cluster: the Slurm allocations of the jobs under the root (see dashboard.hpp).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "job_files.hpp"
#include "troupe/observe/dashboard.hpp"

namespace troupe::observe {

// The answer and its HTTP status: 200 with {"slurm": false, "why"} when no job under `root` ran
// on Slurm or `run` is unset; 502 with {"slurm": false, "why"} when a Slurm command failed.
std::pair<int, nlohmann::json> cluster_json(const jobs_root& root, const slurm_command& run,
                                            std::int64_t now_ms);

}  // namespace troupe::observe
