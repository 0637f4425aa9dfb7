#include "batch_choices.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "troupe/observe/job_events.hpp"

namespace troupe::actors {

namespace {

// The step travels as a float (the controller's state) and as a double (the report, the event's
// JSON, which round-trips): equal in practice; the margin only absorbs a float's last bit.
bool same_step(double a, double b) {
  return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(a));
}

}  // namespace

void batch_choices::read(const std::string& events_path) {
  auto r = observe::read_events(events_path, 0, [](std::string_view line) {
    const auto k = observe::peek_kind(line);
    return k == "batch" || k == "batch_measured";
  });
  if (!r) {
    spdlog::warn("timeline: the earlier batch choices are not known ({}); a choice may be written again",
                 r.err().to_string());
    return;
  }
  for (const auto& e : r->events) {
    const auto number = static_cast<std::uint32_t>(e.number("choice"));
    if (number == 0) continue;
    if (e.kind == "batch") {
      entries_.push_back({number, 0, e.find("at_progress") ? e.number("at_progress") : -1.0, true, false});
      last_ = std::max(last_, number);
    } else {
      // The latest choice of that number (a number is reused only after an older one was measured).
      for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
        if (it->number == number) {
          it->measured = true;
          break;
        }
    }
  }
}

batch_choices::entry& batch_choices::place(std::uint32_t seq, double at_progress) {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    const bool same = it->at_progress < 0
                          ? it->number == seq
                          : same_step(it->at_progress, at_progress) && (it->seq == 0 || it->seq == seq);
    if (same) return *it;
  }
  const std::uint32_t number = seq > last_ ? seq : last_ + 1;
  last_ = number;
  entries_.push_back({number, seq, at_progress, false, false});
  return entries_.back();
}

}  // namespace troupe::actors
