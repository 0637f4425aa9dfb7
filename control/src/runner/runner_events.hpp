// What the runner's other threads tell its loop: a node's exit (the launcher's thread), a scale or
// stop request and the master's final result (the transport's io thread). They push events; the
// loop, and only the loop, drains them and acts, so no state of the runner is shared between
// threads but this queue (and the status the loop publishes for answers: master_watch).
//
// Threads: push() from any thread; drain() and wait_until() from the one consuming thread.
// Events come out in the order they were pushed (one order over all producers).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <variant>

#include "troupe/cluster/launcher.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::control {

// The launcher's exit report of a node.
struct node_exit_event {
  cluster::node_handle handle;
  cluster::exit_status status;
};
// `troupe scale`: the target (clamped to [min_workers, max_workers]) and what was asked.
struct scale_event {
  std::uint32_t workers = 0;
  std::uint32_t requested = 0;
  std::string host;  // where the workers it adds start (troupe scale --host); empty: anywhere
};
// The master's JobFinished: its final metrics and whether every task was done.
struct finished_event {
  std::string result_json;
  bool ok = false;
  node_id from;  // the sender: only the job's current master ends it
};
// `troupe stop` (or another stop message): who asked.
struct stop_event {
  std::string reason;
};

using runner_event = std::variant<node_exit_event, scale_event, finished_event, stop_event>;

class event_queue {
 public:
  explicit event_queue(troupe::clock& clk) : clock_(clk) {}
  event_queue(const event_queue&) = delete;
  event_queue& operator=(const event_queue&) = delete;

  // Queues `e` and wakes the waiter. Any thread; never blocks on the consumer's work.
  void push(runner_event e);
  // Every event queued so far, oldest first; the queue is left empty.
  std::deque<runner_event> drain();
  // Returns once an event is queued (true) or `deadline` has come on the clock (false). A push
  // wakes the waiter at once; `nap` bounds each real wait, so that a manual clock moved past the
  // deadline is seen, and whatever the caller checks besides (a signal flag) is too.
  bool wait_until(troupe::clock::time_point deadline, troupe::clock::duration nap);
  bool empty() const;

 private:
  troupe::clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<runner_event> events_;
};

}  // namespace troupe::control
