// The queue of requests waiting for a replica, and how batches are cut from it. Pure logic: time
// comes in as arguments, nothing blocks, no lock (the core holds its own around it).
//
// Contract:
// - A batch is whole requests, first come first served, at most max_batch rows (every request
//   has at most max_batch rows: the parser refuses more), so one request's rows are never split.
// - A batch is due once it would be full (max_batch rows queued) or its oldest request has waited
//   max_delay; with max_delay 0 every non-empty queue is due (a free replica takes what there is,
//   and batches grow while all replicas are busy).
// - admit() refuses a request that would take the queue past max_queue_rows: memory is bounded.
//   requeue_front() (requests back from a dead replica) is never refused: they were admitted once,
//   and the queue may exceed its bound by what was in flight.
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

#include "request.hpp"

namespace troupe::serve {

struct batch_limits {
  std::size_t max_batch = 64;
  std::chrono::microseconds max_delay{0};
  std::size_t max_queue_rows = 4096;
};

class batcher {
 public:
  explicit batcher(batch_limits limits) : limits_(limits) {}

  // Queues `r` at the back; false (and nothing queued) when it would overflow the queue.
  bool admit(request_ptr r);
  // Puts requests back at the front, in their order (retries go first: they waited longest).
  void requeue_front(std::vector<request_ptr> rs);
  bool due(clock::time_point now) const;
  // When the queue becomes due without new arrivals (nullopt: empty, or due already).
  std::optional<clock::time_point> next_due(clock::time_point now) const;
  // The next batch (empty when the queue is).
  std::vector<request_ptr> take();
  // Removes and returns the requests whose deadline has passed.
  std::vector<request_ptr> expire(clock::time_point now);
  // Removes and returns everything.
  std::vector<request_ptr> drain();

  std::size_t rows() const { return rows_; }
  std::size_t size() const { return queue_.size(); }
  const batch_limits& limits() const { return limits_; }

 private:
  batch_limits limits_;
  std::deque<request_ptr> queue_;
  std::size_t rows_ = 0;
};

}  // namespace troupe::serve
