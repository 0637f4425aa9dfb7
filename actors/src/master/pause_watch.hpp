// Tells whether this process was itself paused: stopped (SIGSTOP, a debugger, a VM or container
// freeze) or starved of the CPU for longer than `threshold`. Its peers saw that as silence and may
// have dropped their connections to it; when it wakes, those drops are its own doing, not the
// peers' deaths (the master gives such peers a grace period to re-join instead of declaring them
// dead, master.cpp).
//
// A thread ticks every 20 ms and records a pause when the gap between two ticks exceeds the
// threshold. paused_within() is right whichever thread runs first after the pause: before the
// watch has ticked again, its last tick is itself older than the threshold. It reads
// troupe::clock::system() and no injected clock: a pause is a gap of real time, which a manual
// clock cannot have.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace troupe::actors {

class pause_watch {
 public:
  explicit pause_watch(std::chrono::milliseconds threshold);
  ~pause_watch();  // stops and joins the thread
  pause_watch(const pause_watch&) = delete;
  pause_watch& operator=(const pause_watch&) = delete;

  // True while the process is waking from a pause longer than the threshold, and for `window`
  // after it woke. Any thread.
  bool paused_within(std::chrono::milliseconds window) const;

 private:
  static std::int64_t now_ns();
  void run(std::stop_token stop);
  const std::int64_t threshold_ns_;
  std::atomic<std::int64_t> last_tick_ns_;
  std::atomic<std::int64_t> woke_ns_{0};  // when the latest pause ended (0: none yet)
  std::jthread thread_;
};

}  // namespace troupe::actors
