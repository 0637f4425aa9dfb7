// The clock seam: code that waits, times out or stamps leases takes a `clock&` so tests can
// drive time by hand (manual_clock) instead of sleeping.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>

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
  // Sleeps for `d` unless `stop` is requested first (then returns at once); false when stopped.
  virtual bool sleep_for(duration d, const std::stop_token& stop) = 0;

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
  bool sleep_for(duration d, const std::stop_token& stop) override {
    if (stop.stop_requested()) return false;
    advance(d);
    return true;
  }
  void advance(duration d) { ns_ += d.count(); }

 private:
  std::atomic<std::int64_t> ns_{0};
  std::int64_t wall_start_;
};

// Waits on `cv` (with `lk` held) until `ready()` or until `deadline` has come on `clk`; returns
// ready(). The real waits last at most `nap` each, so that a manual clock moved past the deadline is
// seen within it; a notify still wakes the waiter at once.
template <typename Cv, typename Lock, typename Ready>
bool wait_until(clock& clk, Cv& cv, Lock& lk, clock::time_point deadline, Ready ready,
                clock::duration nap = std::chrono::milliseconds(20)) {
  for (auto now = clk.now(); !ready(); now = clk.now()) {
    if (now >= deadline) return false;
    cv.wait_for(lk, std::min<clock::duration>(deadline - now, nap), ready);
  }
  return true;
}

}  // namespace troupe
