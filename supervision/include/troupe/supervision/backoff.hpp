// Pure timing policies of a supervisor, kept free of CAF so they can be tested on their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <random>

#include "troupe/core/clock.hpp"

namespace troupe::supervision {

using duration = std::chrono::nanoseconds;

// Exponential backoff with jitter between restarts of a child.
//   nominal(k) = min(max, base * 2^k)        (k = consecutive restarts so far, from 0)
//   delay(k)   = nominal(k) * (1 - jitter * u), u uniform in [0, 1)
// Jitter only shortens the nominal delay, so the cap `max` is never exceeded and a herd of
// children crashing together does not restart in lockstep. base == 0 restarts at once.
struct backoff_policy {
  duration base = std::chrono::milliseconds(100);
  duration max = std::chrono::seconds(5);
  double jitter = 0.2;  // fraction in [0, 1]

  duration nominal(std::uint32_t attempt) const noexcept;
  duration delay(std::uint32_t attempt, std::mt19937_64& rng) const;
  // Smallest delay the jitter can give for `attempt` (nominal * (1 - jitter)).
  duration min_delay(std::uint32_t attempt) const noexcept;
};

// "At most max_restarts restarts within window": record() returns false when one more restart
// would exceed the limit (then the supervisor gives up). Time points come from the caller
// (the actor clock), so a test coordinator's virtual time drives it.
class intensity_window {
 public:
  // troupe::clock's time point: the same type as the actor clock's (steady_clock in nanoseconds).
  using time_point = troupe::clock::time_point;

  intensity_window(std::uint32_t max_restarts, duration window)
      : max_restarts_(max_restarts), window_(window) {}

  // Records a restart at `now`; false if it makes more than max_restarts within the window
  // (the restart is then not allowed).
  bool record(time_point now);
  // Restarts counted within the window ending at `now`.
  std::size_t count(time_point now);

 private:
  void expire(time_point now);
  std::uint32_t max_restarts_;
  duration window_;
  std::deque<time_point> stamps_;
};

}  // namespace troupe::supervision
