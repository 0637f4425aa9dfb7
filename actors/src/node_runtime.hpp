// What every node process has: a CAF actor system, the node's name registry, a transport
// endpoint (listening on loopback unless configured otherwise) bridged to actors by name, the
// latest membership view pushed by the master, and the root supervisor of its role actors. It is
// the role actors' node_context (node_context.hpp) over the real transport and the system clock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <caf/fwd.hpp>

#include "node_context.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/collective/liveness.hpp"
#include "troupe/collective/tcp/link.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

class node_runtime final : public node_context {
 public:
  using identity = node_identity;

  // Starts the actor system and the endpoint, listens on `listen` ("host:port", port may be 0).
  static expected<std::unique_ptr<node_runtime>> start(const job::job_spec& spec, identity who,
                                                       const std::string& listen);
  ~node_runtime() override;

  const job::job_spec& spec() const override { return spec_; }
  const identity& who() const override { return who_; }
  caf::actor_system& system();
  supervision::name_registry& names() { return names_; }
  endpoint& net() { return *net_; }
  const std::string& address() const override { return address_; }
  // A worker's ring listener, on the host of its advertised address (any port), opened once for the
  // life of the process (a restarted worker actor keeps the address its joins advertised) and
  // advertised in its joins from then on: call before mark_ready(). Neighbours on other hosts dial it.
  expected<collective::tcp_listener*> ring_listener();
  // The job's liveness on this host: the master checks a worker's word that a neighbour died
  // against it, a worker starts its beacon with it, ring sessions watch their neighbours with it.
  collective::liveness& liveness() { return *live_; }

  // Frames addressed to `name` are delivered, as a troupe::message, to the actor registered under
  // `name` (dropped, and counted, while it is restarting).
  expected<void> bridge(const std::string& name);

  // Dials the master at `address` and keeps re-joining it whenever the connection comes back (a
  // restarted master). Blocks until the first join is sent or the connect fails.
  expected<void> join_master(const std::string& address,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // A worker joins the membership (and so the next allreduce ring) only once it can train: its
  // peers would otherwise wait in the ring's rendezvous while it builds its model. Until
  // mark_ready(), join_master() connects without joining.
  void defer_join() { ready_.store(false); }
  void mark_ready() override;
  bool ready() const override { return ready_.load(); }

  // node_context: the endpoint's send (no waiting for queue room).
  expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                      const std::string& from) override;
  // The latest membership view from the master (epoch 0 before the first one).
  cluster::membership_view view() const override;
  // The view and its ring epoch, read together.
  std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const override;
  // The epoch at which the ring of alive workers last changed, readable without a lock:
  // collectives poll it to fail fast when their ring is replaced.
  const std::atomic<std::uint64_t>& ring_epoch() const override { return ring_epoch_; }
  void wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) override;
  // The node's shared-memory liveness beacon is released (its process exited).
  bool gone(const node_id& id) const override;
  void forget(const node_id& id) override;
  // troupe::clock::system().
  troupe::clock& clock() override;
  // Called (on the io thread) when a peer node goes down.
  void on_peer_down(std::function<void(const peer_event&)> fn);

  // Connects to `node` at `address` unless already connected (blocking; not from the io thread).
  expected<void> ensure_connected(const std::string& node, const std::string& address);

  // Leaving on SIGTERM (node_leave.cpp): a worker tells the master that this incarnation leaves (a
  // NodeExited about itself); the master removes it at once, re-queues its leases and publishes a
  // ring without it, and answers with that view. From here on the node never re-joins, and a view
  // without it is that answer rather than a reason to exit. Returns false when the master could
  // not be told (not connected): its death notice then does the same, later.
  bool leave(const std::string& reason);
  // Waits until the master's answer to leave() came (true), the master's connection was lost or
  // `limit` passed (false).
  bool await_left(std::chrono::milliseconds limit);
  bool leaving() const { return leaving_.stop_requested(); }
  // Requested by leave(): the worker's rpc clients stop waiting for replies then (a PS shard that
  // stops with the job answers no pull), so the worker actor stops at once.
  std::stop_token leave_token() const { return leaving_.get_token(); }

  // The job's token (job dir file) and the master's address in a job dir.

 private:
  node_runtime(job::job_spec spec, identity who);
  void handle_membership(const message& m);
  // JobMessage.inject (from `troupe chaos`): the transport fault knob, reset after a while.
  void handle_inject(const message& m);
  job::job_spec spec_;
  identity who_;
  struct caf_parts;
  std::unique_ptr<caf_parts> caf_;
  supervision::name_registry names_;
  std::unique_ptr<endpoint> net_;
  // Guards net_ for the calls actors make (send, ensure_connected, mark_ready): the destructor
  // takes net_ out under the unique lock before destroying it, so an actor that still handles a
  // message while the node shuts down gets an error, not a freed endpoint.
  std::shared_mutex net_mu_;
  // The error for a call made once net_ is gone.
  error shutting_down() const;
  std::unique_ptr<collective::liveness> live_;
  std::string address_;
  std::unique_ptr<collective::tcp_listener> ring_listener_;  // and ring_address_: under mu_
  std::string ring_address_;
  std::atomic<std::uint64_t> ring_epoch_{0};
  std::atomic<bool> ready_{true};
  std::stop_source leaving_;
  bool left_ = false, master_lost_ = false;  // under mu_
  std::condition_variable left_cv_;
  void send_join();
  // Re-sends join until a view of the master lists this incarnation: a join that reached a master
  // whose actors were not up yet (a relaunched master listens first) was dropped, and a node that
  // is not a member has its leases taken back and its reports refused.
  void retry_join(std::stop_token stop);
  bool joined_ = false;  // under mu_: the master this node follows lists it
  std::uint64_t master_incarnation_ = 0;
  mutable std::mutex mu_;
  std::condition_variable ring_changed_;  // with mu_: ring_epoch_ moved
  cluster::membership_view view_;
  std::vector<std::function<void(const peer_event&)>> down_fns_;
  std::string master_address_;
  std::mutex inject_mu_;
  std::jthread inject_reset_;
  std::jthread join_retry_;
};

}  // namespace troupe::actors
