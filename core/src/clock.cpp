#include "troupe/core/clock.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace troupe {

namespace {
class system_clock_impl final : public clock {
 public:
  time_point now() const override {
    return std::chrono::time_point_cast<duration>(std::chrono::steady_clock::now());
  }
  std::int64_t wall_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  void sleep_for(duration d) override { std::this_thread::sleep_for(d); }
  bool sleep_for(duration d, const std::stop_token& stop) override {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lk(mu);
    return !cv.wait_for(lk, stop, d, [] { return false; }) && !stop.stop_requested();
  }
};
}  // namespace

clock& clock::system() {
  static system_clock_impl instance;
  return instance;
}

}  // namespace troupe
