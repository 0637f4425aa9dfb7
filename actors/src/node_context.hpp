// The seam between a role actor and its node: what the dispenser, the PS shards, the worker's
// training loop and the master need from the process they run in. node_runtime
// implements it over the real transport, membership and clock; unit tests implement it with a
// fake that records what is sent and a manual_clock, so a role's behaviour runs without sockets,
// sleeps or an actor system.
//
// Threading: send(), reply(), view*(), wait_ring_change() and gone() may be called from any thread; clock()
// is the node's clock (troupe::clock::system() in a real node) and outlives every role actor.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "troupe/cluster/membership.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/ids.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::actors {

// The ring epoch of a node that leaves (SIGTERM): it stays there whatever views come after, so a
// collective in flight fails at once and the node is in no ring any more.
inline constexpr std::uint64_t leaving_ring_epoch = ~std::uint64_t{0};

// A leaving worker's bounds (docs/job.md, "A leaving worker's task"): the ring writer's last
// checkpoint, then the acknowledgements of its reports (its hand-back among them), both inside the
// node's wait for the hand-back, past which it tells the master all the same (the task goes back
// whole). Measured leaves take 2-35 ms (docs/benchmarks.md, "A stop with the workers' hand-back").
inline constexpr std::chrono::milliseconds leave_checkpoint_bound{2000};
inline constexpr std::chrono::milliseconds leave_reports_bound{1500};
inline constexpr std::chrono::milliseconds leave_hand_back_bound =
    leave_checkpoint_bound + leave_reports_bound + std::chrono::milliseconds(500);

// Who a node is: its id, role and index (ps-<index>, worker-<index>), its job and job dir.
struct node_identity {
  node_id id;
  cluster::node_role role = cluster::node_role::worker;
  std::size_t index = 0;
  std::string job_dir;
  std::string job_id;
  // collective::instance_key(job id, the runner's instance): what this run's /dev/shm names are
  // built from, so two jobs with one id on a host never share a ring or a beacon.
  std::string host_key;
  // A worker's place among the running workers: its GPU is slot % device count (the runner hands
  // out the lowest free one; worker indices are never reused, so they would not spread).
  std::size_t slot = 0;
};

class node_context {
 public:
  virtual ~node_context() = default;

  // Identity and the job's spec (both fixed for the node's life).
  virtual const job::job_spec& spec() const = 0;
  virtual const node_identity& who() const = 0;
  const node_id& self() const { return who().id; }
  // The address ("host:port") this node's endpoint listens on, as peers dial it.
  virtual const std::string& address() const = 0;

  // Queues `m` for actor `to` on `node`, sent as actor `from`. Fails (not_connected, queue_full)
  // without blocking the caller beyond the transport's own backpressure.
  virtual expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                              const std::string& from) = 0;
  // Answers `request`: `m` (built by reply_to(request), so that it carries the request's
  // correlation id) goes to the actor that sent it, on its node.
  expected<void> reply(const message& request, outbound&& m, const std::string& from) {
    return send(request.from_node().name, std::string(request.from()), std::move(m), from);
  }

  // The latest membership view (epoch 0 before the first), and it with its ring epoch, read together.
  virtual cluster::membership_view view() const = 0;
  virtual std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const = 0;
  // The epoch at which the ring of alive workers last changed, readable without a lock.
  virtual const std::atomic<std::uint64_t>& ring_epoch() const = 0;
  // Blocks until the ring epoch is no longer `seen` or `deadline` has come on clock(); woken by the
  // change itself (a worker whose ring broke waits for the next one without polling).
  virtual void wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) = 0;

  // Liveness: true once node `id` (that incarnation) is known to be gone (its process exited), a
  // fact rather than a suspicion. False while it runs or nothing is known.
  virtual bool gone(const node_id& id) const = 0;
  // Drops what liveness still records of `id` once it is gone (its released beacon); no-op for a
  // node that still runs.
  virtual void forget(const node_id& id) = 0;

  // The nodes connected to this one now (their transport connections are up: they answer
  // heartbeats). A worker holds leases before it joins (it warms up first): the master counts it
  // among the live holders by its connection until then.
  virtual std::vector<node_id> peers() const = 0;

  // This node leaves the job (SIGTERM, node_runtime::leave): a worker takes no further step.
  virtual bool leaving() const { return false; }
  // A worker's training loop holds a task it would hand back as it leaves (true from its set-up;
  // false once the loop is over or it handed back): node_main's leave_job tells the master that
  // the node leaves only once it is false (or a bound passed).
  virtual void hand_back_pending(bool pending) {}
  // The view as this node began to leave (the latest one while it does not): the ring's checkpoint
  // writer on leaving is chosen from it, as later views lack the workers that left meanwhile.
  virtual cluster::membership_view view_at_leave() const { return view(); }

  // A worker joins the membership only once it can train (node_runtime::defer_join).
  virtual bool ready() const = 0;
  virtual void mark_ready() = 0;

  // The clock every wait, timeout and lease stamp of a role actor reads.
  virtual troupe::clock& clock() = 0;
};

}  // namespace troupe::actors
