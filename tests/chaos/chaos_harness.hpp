// Chaos scenarios: run a job undisturbed, run it again under `troupe chaos`, then check the
// invariants every scenario must keep (completion, every task DONE, checkpoints loadable, metric
// close to the undisturbed run, no orphan process).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../job/job_harness.hpp"

namespace troupe::testing {

struct chaos_run {
  int exit_code = -1;  // of `troupe chaos` (1 when the job failed)
  std::string job_dir, output;
  nlohmann::json report;  // --report
};

// Runs `troupe chaos --job <toml> <chaos_args>` for a job named `name`.
chaos_run run_under_chaos(const std::string& name, const std::string& toml, const std::string& chaos_args);

// Job files: mlp_job and ctr_job of job_harness.hpp.

// Checks every invariant (gtest expectations); `metric` is the result key compared with the
// undisturbed run's, within `tolerance`.
void expect_invariants(const chaos_run& c, const nlohmann::json& clean_result, const std::string& metric,
                       double tolerance);
// The faults of the report that hit a node (not skipped).
std::size_t faults_injected(const nlohmann::json& report, const std::string& kind = "");

}  // namespace troupe::testing
