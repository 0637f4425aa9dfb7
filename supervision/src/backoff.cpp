#include "troupe/supervision/backoff.hpp"

#include <algorithm>

namespace troupe::supervision {

duration backoff_policy::nominal(std::uint32_t attempt) const noexcept {
  if (base <= duration::zero()) return duration::zero();
  // Doubling past the cap (or past 62 shifts) cannot come back under it.
  auto d = base;
  for (std::uint32_t i = 0; i < attempt && d < max; ++i) d *= 2;
  return std::min(d, max);
}

duration backoff_policy::delay(std::uint32_t attempt, std::mt19937_64& rng) const {
  auto n = nominal(attempt);
  if (jitter <= 0.0 || n == duration::zero()) return n;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double factor = 1.0 - std::clamp(jitter, 0.0, 1.0) * u(rng);
  return duration(static_cast<duration::rep>(static_cast<double>(n.count()) * factor));
}

duration backoff_policy::min_delay(std::uint32_t attempt) const noexcept {
  auto n = nominal(attempt);
  double factor = 1.0 - std::clamp(jitter, 0.0, 1.0);
  return duration(static_cast<duration::rep>(static_cast<double>(n.count()) * factor));
}

void intensity_window::expire(time_point now) {
  while (!stamps_.empty() && now - stamps_.front() >= window_) stamps_.pop_front();
}

bool intensity_window::record(time_point now) {
  expire(now);
  if (stamps_.size() >= max_restarts_) return false;
  stamps_.push_back(now);
  return true;
}

std::size_t intensity_window::count(time_point now) {
  expire(now);
  return stamps_.size();
}

}  // namespace troupe::supervision
