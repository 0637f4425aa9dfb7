// The membership view a node follows: the latest view the master pushed (epoch 0 before the first)
// with its ring epoch, the master incarnation it came from, and whether that view lists this node
// (joined). Views only move forward, except that a restarted master (a higher incarnation) starts a
// new sequence; a view of an older master (a hung master that woke up before it was fenced) is
// ignored.
//
// Contract: every method may be called from any thread (one mutex; ring_epoch() is an atomic read
// without it). wait_ring_change() is woken by take() itself and measures its deadline on `clk`
// (at most 20 ms between two looks at it, so a manual clock moved past the deadline ends it). No
// I/O, no errors.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "node_context.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

class node_view {
 public:
  // False for a view of a master older than the one this node follows.
  bool from_current_master(const wire::membership_msg& msg) const;
  // Takes the view of `msg` when it is newer than the one held or comes from a newer master;
  // `listed`: it lists this node's incarnation. True when it was taken (waiters woken). The view held
  // again, listing this node, makes it a member again (joined) and is not taken.
  bool take(const wire::membership_msg& msg, bool listed);
  // The whole view a delta describes, from the view held: nullopt when the held view is not the
  // delta's base (a view missed, or another master's sequence), or the delta is malformed.
  std::optional<cluster::membership_view> expand(const wire::membership_msg& delta) const;
  // The master's connection was lost: this node counts as not joined until a view lists it again.
  void master_down();
  // The master this node follows lists it in its latest view.
  bool joined() const;
  // The epoch of the view held (0 before the first).
  std::uint64_t epoch() const;
  // The incarnation of the master this node follows (0 before the first view).
  std::uint64_t master_incarnation() const;

  cluster::membership_view view() const;
  // The view and its ring epoch, read together.
  std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const;
  // The epoch at which the ring of alive workers last changed.
  const std::atomic<std::uint64_t>& ring_epoch() const { return ring_epoch_; }
  // Blocks until the ring epoch is no longer `seen` or `deadline` has come on `clk`.
  void wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline, troupe::clock& clk);
  // This node leaves (SIGTERM): the ring epoch moves to leaving_ring_epoch and stays there, whatever
  // views come after, so that a collective in flight fails at once (collectives compare the epoch
  // they run at with ring_epoch()) and no ring is built again. Waiters are woken.
  void leave();
  bool leaving() const;
  // The view held when leave() was called (the current one before): which workers were alive as
  // this node began to leave, before the master's answers removed them one by one.
  cluster::membership_view view_at_leave() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;  // with mu_: ring_epoch_ moved
  cluster::membership_view view_;
  cluster::membership_view at_leave_;
  std::atomic<std::uint64_t> ring_epoch_{0};
  std::uint64_t master_incarnation_ = 0;
  bool joined_ = false;
  bool leaving_ = false;
};

}  // namespace troupe::actors
