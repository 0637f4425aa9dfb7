#include "runner_events.hpp"

namespace troupe::control {

void event_queue::push(runner_event e) {
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::deque<runner_event> event_queue::drain() {
  std::deque<runner_event> out;
  std::lock_guard lk(mu_);
  out.swap(events_);
  return out;
}

bool event_queue::wait_until(troupe::clock::time_point deadline, troupe::clock::duration nap) {
  std::unique_lock lk(mu_);
  return troupe::wait_until(
      clock_, cv_, lk, deadline, [&] { return !events_.empty(); }, nap);
}

bool event_queue::empty() const {
  std::lock_guard lk(mu_);
  return events_.empty();
}

}  // namespace troupe::control
