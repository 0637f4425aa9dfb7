// The runner's heartbeat: <job dir>/runner.beat rewritten every second ("<pid> <count>") from a
// thread of its own, since the runner's loop may block for tens of seconds in a launcher call (an
// sbatch while slurmctld is away). Nodes that stop hearing it for [cluster] runner_timeout_s end
// themselves (node_main.cpp, runner_watch): a runner killed with SIGKILL, or whose machine went
// away, leaves no node running where PR_SET_PDEATHSIG cannot reach (Slurm jobs, other hosts).
#pragma once

#include <string>
#include <thread>

#include "troupe/core/clock.hpp"

namespace troupe::control {

class runner_beat {
 public:
  // Writes the first beat before it returns (the nodes launched next find it), then every second.
  runner_beat(std::string path, troupe::clock& clk);
  ~runner_beat();  // stops beating; the file stays (its count no longer moves)
  runner_beat(const runner_beat&) = delete;
  runner_beat& operator=(const runner_beat&) = delete;

 private:
  void beat();

  std::string path_;
  troupe::clock& clock_;
  unsigned long long count_ = 0;
  bool warned_ = false;
  std::jthread thread_;
};

}  // namespace troupe::control
