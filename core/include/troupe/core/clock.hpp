// The clock seam: code that waits, times out or stamps leases takes a `clock&` so tests can
// drive time by hand (manual_clock) instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace troupe {

class clock {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~clock() = default;
  // Monotonic time.
  virtual time_point now() const = 0;
  // Wall-clock milliseconds since the Unix epoch (for leases persisted across processes).
  virtual std::int64_t wall_ms() const = 0;
  virtual void sleep_for(duration d) = 0;

  // The process-wide real clock.
  static clock& system();
};

// A clock that moves only when told. Thread-safe.
class manual_clock final : public clock {
 public:
  explicit manual_clock(std::int64_t start_wall_ms = 1'700'000'000'000) : wall_start_(start_wall_ms) {}
  time_point now() const override { return time_point(duration(ns_.load())); }
  std::int64_t wall_ms() const override { return wall_start_ + ns_.load() / 1'000'000; }
  // Sleeping on a manual clock advances it: the sleeper "waited".
  void sleep_for(duration d) override { advance(d); }
  void advance(duration d) { ns_ += d.count(); }

 private:
  std::atomic<std::int64_t> ns_{0};
  std::int64_t wall_start_;
};

}  // namespace troupe
