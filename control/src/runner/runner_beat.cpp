#include "runner_beat.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "troupe/cluster/job_dir.hpp"

namespace troupe::control {

runner_beat::runner_beat(std::string path, troupe::clock& clk) : path_(std::move(path)), clock_(clk) {
  beat();
  thread_ = std::jthread([this](std::stop_token stop) {
    while (clock_.sleep_for(std::chrono::seconds(1), stop)) beat();
  });
}

runner_beat::~runner_beat() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

void runner_beat::beat() {
  auto r =
      cluster::write_file_atomic(path_, std::to_string(::getpid()) + " " + std::to_string(++count_) + "\n");
  // Named once until a beat succeeds again: the nodes end themselves if the beats stay away for
  // runner_timeout_s.
  if (!r && !warned_) spdlog::warn("the runner's heartbeat: {}", r.err().to_string());
  warned_ = !r;
}

}  // namespace troupe::control
