#include "job_progress.hpp"

#include <chrono>

namespace troupe::actors {

void job_progress::restore(const job_counters& saved) {
  samples_total_ = saved.samples_trained;
  dropped_steps_ = saved.dropped_steps;
  first_step_wall_ms_ = saved.first_step_wall_ms;
}

void job_progress::add(std::uint64_t samples, std::uint64_t steps, double loss_sum, std::uint64_t dropped,
                       std::uint64_t first_step_wall_ms) {
  window_samples_ += samples;
  window_steps_ += steps;
  window_loss_ += loss_sum;
  samples_total_ += samples;
  dropped_steps_ += dropped;
  if (first_step_wall_ms != 0 && (first_step_wall_ms_ == 0 || first_step_wall_ms < first_step_wall_ms_))
    first_step_wall_ms_ = first_step_wall_ms;
}

void job_progress::roll(troupe::clock::time_point now) {
  double secs = std::chrono::duration<double>(now - window_start_).count();
  if (secs < 1.0) return;
  samples_per_sec_ = static_cast<double>(window_samples_) / secs;
  if (window_steps_ > 0) loss_ = window_loss_ / static_cast<double>(window_steps_);
  window_samples_ = window_steps_ = 0;
  window_loss_ = 0;
  window_start_ = now;
}

double job_progress::last_loss() const {
  return window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : loss_;
}

job_counters job_progress::counters(std::uint64_t master_starts) const {
  job_counters c;
  c.samples_trained = samples_total_;
  c.dropped_steps = dropped_steps_;
  c.first_step_wall_ms = first_step_wall_ms_;
  c.master_starts = master_starts;
  return c;
}

}  // namespace troupe::actors
