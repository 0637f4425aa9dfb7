// Running a short external command with a bound: the Slurm launcher's sbatch/squeue/scontrol,
// the local launcher's host faults and the dashboard's sinfo/sacct.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"

namespace troupe::cluster {

struct tool_result {
  int code = 0;  // exit code; 128+N when killed by signal N
  std::string out, err;
};

// Runs argv (argv[0] looked up in `bin_dir`, else PATH) with stdin on /dev/null, collecting stdout
// and stderr; kills it past `timeout`. Errors (launch_failed) only when it cannot be started or
// timed out or (max_output > 0) printed more than max_output bytes; a non-zero exit is a result.
// `timeout` is measured on `clk` (looked at between reads, at least every 50 ms).
expected<tool_result> run_tool(const std::vector<std::string>& argv, const std::string& bin_dir,
                               std::chrono::milliseconds timeout, std::size_t max_output = 0,
                               troupe::clock& clk = troupe::clock::system());

}  // namespace troupe::cluster
