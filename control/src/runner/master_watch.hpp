// The runner's watch over the master: when a status poll is due, the master's latest status, how
// long it has been silent, and when it counts as hung (then the runner fences it). It also holds
// the status the runner answers `troupe status` with: the master's, with the runner's own fields
// (target, restarts, the final result) that the loop publishes.
//
// Contract:
// - Threads: the runner's loop calls every method but status() and answer(), which any thread may
//   call (the transport's io thread answers status requests); quiet() is one atomic load.
// - Time: the clock given at construction; tests pass a manual_clock.
// - A master that never answered gets startup_limit from its launch; once it answered, hang_limit
//   without an answer is a hang (the master answers status from its own mailbox: a slow tick does
//   not get that far). quiet_after without an answer shows as "not answering", with stale numbers.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "troupe/core/clock.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::control {

// The master's latest status (valid once it answered).
struct status_snapshot : wire::job_status {
  bool valid = false;
};

struct watch_limits {
  troupe::clock::duration poll_interval = std::chrono::milliseconds(250);
  troupe::clock::duration startup_limit = std::chrono::seconds(30);
  troupe::clock::duration hang_limit = std::chrono::seconds(3);
  troupe::clock::duration quiet_after = std::chrono::milliseconds(1500);
};

// What only the runner knows, in its status answers.
struct runner_fields {
  std::string job_id;
  std::uint32_t workers_target = 0, workers_launched = 0;
  std::uint64_t restarts = 0;
  std::uint32_t hand_workers = 0, max_launched = 0;  // slot_table's, for reply_scale's clamp
  bool finished = false;
  std::string result_json;
};

class master_watch {
 public:
  master_watch(troupe::clock& clk, watch_limits l) : clock_(clk), limits_(l) {}
  void set_limits(const watch_limits& l) { limits_ = l; }
  const watch_limits& limits() const { return limits_; }

  // A new master incarnation runs: its startup limit counts from now, its silence is no hang yet.
  void launched();
  // True (and the poll counted as sent) when a status poll is due; `force`: due now.
  bool poll_due(bool force = false);
  // When the next poll is due; nullopt before the first.
  std::optional<troupe::clock::time_point> next_poll() const;
  // The master answered a status request with `s`.
  void answered(const wire::job_status& s);
  // The master's view is no longer to be acted on (its incarnation was fenced).
  void forget_status();
  // The runner itself was paused (stopped, starved, blocked in a command): the master's silence
  // meanwhile says nothing about it, so its limit counts again from now.
  void excuse();
  // How long the master has been silent when that is a hang (or it never came up): fence it.
  std::optional<troupe::clock::duration> hung() const;
  bool ever_answered() const { return answered_; }
  // Updated by refresh(); any thread.
  bool quiet() const { return quiet_.load(); }
  void refresh();
  troupe::clock::duration silent_for() const { return clock_.now() - heard_; }

  status_snapshot status() const;   // any thread
  void publish(runner_fields f);    // the loop's fields for answers
  wire::job_status answer() const;  // any thread: the master's status with the runner's fields
  runner_fields fields() const;     // any thread: the last published

 private:
  troupe::clock& clock_;
  watch_limits limits_;
  std::optional<troupe::clock::time_point> last_poll_;
  troupe::clock::time_point heard_{}, launched_{};
  bool answered_ = false;
  std::atomic<bool> quiet_{false};
  mutable std::mutex mu_;  // status_ and fields_, read by the io thread
  status_snapshot status_;
  runner_fields fields_;
};

}  // namespace troupe::control
