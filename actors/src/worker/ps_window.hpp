// The requests a worker keeps in flight to its PS shards over one rpc_channel: pushes sent without
// waiting for their replies (at most `max_pushes` unacknowledged; the oldest is waited for before
// one more goes out), and requests sent ahead whose replies are collected later (a pull of the
// next batch's rows, remote_ps::prefetch).
//
// Order: a worker reaches each shard over one connection, and the shard's actor serves its mailbox
// in arrival order, so a request sees every push this worker sent to that shard before it, whether
// acknowledged or not. Unacknowledged pushes therefore add no staleness of their own; they bound
// what a failure can lose (below).
//
// Failure: a push refused by its shard (an error reply), unanswered within the timeout, or lost with
// its shard (the shard's connection went down: killed, restarting) fails the next call that sees
// it. Every push still unacknowledged is then forgotten (abandoned: its reply, if one comes, is
// dropped) and the caller takes its retry path; a forgotten push is never sent again, so none is
// applied twice. What it loses: at most `max_pushes` (+1, the one just sent) gradients of this
// worker on a shard that went down, which that shard's restore from its last checkpoint loses
// anyway (it loses every update since that checkpoint).
//
// Threads: one (the worker's training thread), like the rpc_channel's send/poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

class ps_window {
 public:
  // The rpc ids of requests sent together (one per shard), in the order they were given.
  using group = std::vector<std::uint64_t>;

  // `stopping`: true once the worker leaves (SIGTERM); no wait goes on after it.
  ps_window(wire::rpc_channel& rpc, std::size_t max_pushes, std::function<bool()> stopping)
      : rpc_(rpc), max_pushes_(max_pushes), stopping_(std::move(stopping)) {}

  // Sends every request (moving out each out) without waiting. When one cannot be sent, those
  // sent before it are abandoned and the send error returned.
  expected<group> send(std::vector<wire::rpc_channel::request>& reqs, std::chrono::milliseconds timeout);
  // Waits for the replies of `g`, returned in its order. On a timeout, a node gone or the worker
  // leaving: the requests not answered yet are abandoned, core_errc::io_error.
  expected<std::vector<message>> await(const group& g);
  // Takes the push group `g` into the window; collects the push replies that have come; then
  // waits for the oldest while more than max_pushes are unacknowledged (max_pushes 0: for `g`
  // itself, a push acknowledged before this returns). An error is a push that failed (see above):
  // the window is empty after it.
  expected<void> add_push(group g);
  // Collects the push replies that have come, without waiting; the error of a failed one.
  expected<void> collect();
  // Waits until every push is acknowledged (the end of a task); the error of a failed one.
  expected<void> settle();
  // Called with every push reply accepted, in order (before add_push / collect / settle return).
  void on_push_reply(std::function<void(const message&)> f) { on_push_reply_ = std::move(f); }
  // Forgets `g`: its replies are polled (and dropped) by later calls until they come or expire,
  // so that the channel does not keep them.
  void abandon(const group& g);

  // Push groups sent and not acknowledged (at most max_pushes between calls).
  std::size_t unacknowledged() const { return pushes_.size(); }
  std::size_t max_pushes() const { return max_pushes_; }

 private:
  // The reply of request `id`, waiting for it (in naps, so that the leave is seen).
  expected<message> await_one(std::uint64_t id);
  // Whether the oldest push group is acknowledged (false: not all replies there yet). An error:
  // one of them failed; the window is then abandoned.
  expected<bool> try_oldest(bool wait);
  void abandon_window();
  void reap();
  wire::rpc_channel& rpc_;
  std::size_t max_pushes_;
  std::function<bool()> stopping_;
  std::function<void(const message&)> on_push_reply_;
  std::deque<group> pushes_;              // oldest first
  std::vector<std::uint64_t> abandoned_;  // polled until answered or expired
};

}  // namespace troupe::actors
