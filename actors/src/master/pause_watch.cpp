#include "pause_watch.hpp"

#include <spdlog/spdlog.h>

#include "troupe/core/clock.hpp"

namespace troupe::actors {

pause_watch::pause_watch(std::chrono::milliseconds threshold)
    : threshold_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(threshold).count()),
      last_tick_ns_(now_ns()),
      thread_([this](std::stop_token stop) { run(stop); }) {}

pause_watch::~pause_watch() {
  thread_.request_stop();
}

std::int64_t pause_watch::now_ns() {
  return troupe::clock::system().now().time_since_epoch().count();
}

bool pause_watch::paused_within(std::chrono::milliseconds window) const {
  auto now = now_ns();
  if (now - last_tick_ns_.load() > threshold_ns_) return true;  // waking: the watch has not ticked yet
  auto woke = woke_ns_.load();
  return woke != 0 && now - woke < std::chrono::duration_cast<std::chrono::nanoseconds>(window).count();
}

void pause_watch::run(std::stop_token stop) {
  while (troupe::clock::system().sleep_for(std::chrono::milliseconds(20), stop)) {
    auto now = now_ns();
    auto gap = now - last_tick_ns_.load();
    if (gap > threshold_ns_) {
      woke_ns_.store(now);
      spdlog::warn(
          "this process did not run for {} ms (stopped or starved): peers that dropped it meanwhile "
          "are not dead for that",
          gap / 1'000'000);
    }
    last_tick_ns_.store(now);
  }
}

}  // namespace troupe::actors
