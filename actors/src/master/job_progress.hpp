// The job's training progress as the workers report it (JobMessage workerProgress): totals that
// outlive the master (samples, dropped steps, the first step's time; saved in counters.json by
// master_durable.hpp) and a window of at least a second for samples/s and the mean minibatch loss.
// Pure state on the caller's time: the master actor feeds it; the status reply, the timeline,
// /metrics and result.json read it.
#pragma once

#include <cstdint>
#include <limits>

#include "job_counters.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::actors {

class job_progress {
 public:
  // The window starts at `now`.
  explicit job_progress(troupe::clock::time_point now = {}) : window_start_(now) {}
  // The totals a previous master saved (a restarted master continues them).
  void restore(const job_counters& saved);
  // A worker's report of its steps since its last report: their samples, count and summed loss,
  // the steps it dropped, and the Unix ms of its first trained minibatch (0: not sent).
  void add(std::uint64_t samples, std::uint64_t steps, double loss_sum, std::uint64_t dropped,
           std::uint64_t first_step_wall_ms);
  // Closes the window once it is a second old at `now`: samples/s, and the mean loss of its steps
  // (the previous window's is kept when it had none).
  void roll(troupe::clock::time_point now);

  std::uint64_t samples_total() const { return samples_total_; }
  std::uint64_t dropped_steps() const { return dropped_steps_; }
  std::uint64_t first_step_wall_ms() const { return first_step_wall_ms_; }
  double samples_per_sec() const { return samples_per_sec_; }
  // The mean minibatch loss of the last full window with a step; NaN before one.
  double loss() const { return loss_; }
  // The mean loss of the latest steps: the window under way, else the last full one.
  double last_loss() const;
  // The totals as counters.json keeps them, with the number of masters started.
  job_counters counters(std::uint64_t master_starts) const;

 private:
  std::uint64_t samples_total_ = 0, dropped_steps_ = 0;
  std::uint64_t first_step_wall_ms_ = 0;  // earliest first trained minibatch of any worker (Unix ms)
  troupe::clock::time_point window_start_;
  std::uint64_t window_samples_ = 0, window_steps_ = 0;
  double window_loss_ = 0;
  double samples_per_sec_ = 0;
  double loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace troupe::actors
