// A rate limit for a log line that someone else can make repeat at will (a refused connection,
// a bad frame): the first `burst` occurrences in each window are logged, the rest only counted and
// summed up in one line once the window is over ("... and 39950 more like this in the last 10 s").
// Without it any local user could fill a job's disk through its logs.
//
// Not thread-safe: one per thread, or guarded by its caller. Time comes from the caller (testable).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "troupe/core/clock.hpp"

namespace troupe {

// Text someone else sent (a peer's bytes in a reason), as a log line may hold it: bytes outside
// printable ASCII as \xNN, cut after `max` characters ("..." then).
std::string printable_text(std::string_view text, std::size_t max);

class log_limit {
 public:
  using time_point = clock::time_point;  // on the caller's troupe::clock

  log_limit(std::size_t burst, std::chrono::milliseconds window) : burst_(burst), window_(window) {}

  struct verdict {
    bool log = false;     // log this occurrence
    std::string summary;  // not empty: log this first (what the last window held back)
  };
  // One occurrence at `now`.
  verdict note(time_point now);
  // The summary of a window that is over by `now` ("" when it held nothing back); what a timer
  // calls at window_end() so that the count is told even when no occurrence follows. `now_anyway`:
  // also of the current window (at shutdown).
  std::string flush(time_point now, bool now_anyway = false);
  // When the current window ends (meaningful once held_back() > 0).
  time_point window_end() const { return start_ + window_; }
  std::uint64_t held_back() const { return held_back_; }

 private:
  std::string close_window(time_point now);
  std::size_t burst_;
  std::chrono::milliseconds window_;
  time_point start_{};
  bool started_ = false;
  std::size_t logged_ = 0;
  std::uint64_t held_back_ = 0;
};

}  // namespace troupe
