// What every node process has: a CAF actor system, the node's name registry, a transport
// endpoint (listening on loopback unless configured otherwise) bridged to actors by name, and the
// root supervisor of its role actors. It is the role actors' node_context (node_context.hpp), and
// a worker's worker_host (worker_host.hpp), over the real transport and the system clock, and composes the
// node's concerns, each in its own file:
// - the membership view it follows (node_view.hpp),
// - joining and leaving the master's membership (membership_client.hpp),
// - a worker's ring listener (node_ring_listener.hpp),
// - the transport faults `troupe chaos` injects (fault_injector.hpp).
//
// Threads: every method may be called from any thread once start() returned, except
// join_master() (start-up, not from the io thread). Actors may still call send(), mark_ready() and
// connect() while the node shuts down: they get an error then, never a freed endpoint.
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

#include "fault_injector.hpp"
#include "membership_client.hpp"
#include "node_ring_listener.hpp"
#include "node_view.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/collective/liveness.hpp"
#include "troupe/collective/tcp/link.hpp"
#include "troupe/core/log_limit.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/wire/messages.hpp"
#include "worker_host.hpp"

namespace troupe::actors {

class node_runtime final : public worker_host {
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
  // worker_host: a worker's ring listener, on the host of its advertised address (any port), opened
  // once for the life of the process (a restarted worker actor keeps the address its joins
  // advertised). Neighbours on other hosts dial it.
  expected<collective::tcp_listener*> ring_listener() override;
  const std::string& job_token() const override { return token_; }
  // The job's liveness on this host: the master checks a worker's word that a neighbour died
  // against it, a worker starts its beacon with it, ring sessions watch their neighbours with it.
  collective::liveness& liveness() override { return *live_; }
  // An rpc client on the endpoint under `name` (re-registered), on clock(), stopped by leave().
  expected<std::unique_ptr<wire::rpc_channel>> open_rpc(const std::string& name) override;

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
  void defer_join() { join_->defer(); }
  void mark_ready() override { join_->mark_ready(); }
  bool ready() const override { return join_->ready(); }

  // node_context: the endpoint's send (no waiting for queue room).
  expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                      const std::string& from) override;
  // The latest membership view from the master (epoch 0 before the first one).
  cluster::membership_view view() const override;
  // The view and its ring epoch, read together.
  std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const override;
  // The epoch at which the ring of alive workers last changed, readable without a lock:
  // collectives poll it to fail fast when their ring is replaced.
  const std::atomic<std::uint64_t>& ring_epoch() const override { return view_.ring_epoch(); }
  void wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) override;
  // The node's shared-memory liveness beacon is released (its process exited).
  bool gone(const node_id& id) const override;
  std::vector<node_id> peers() const override;
  void forget(const node_id& id) override;
  // troupe::clock::system().
  troupe::clock& clock() override;
  // Called (on the io thread) when a peer node goes down.
  void on_peer_down(std::function<void(const peer_event&)> fn);

  // Connects to `node` at `address` unless already connected (blocking; not from the io thread).
  expected<void> connect(const std::string& node, const std::string& address) override;

  // Leaving on SIGTERM (membership_client.hpp): a worker tells the master that this incarnation
  // leaves (a NodeExited about itself); the master removes it at once, re-queues its leases and
  // publishes a ring without it, and answers with that view. From here on the node never re-joins,
  // and a view without it is that answer rather than a reason to exit. Returns false when the
  // master could not be told (not connected): its death notice then does the same, later.
  // Either way the ring is given up at once (node_view::leave): a collective in flight fails now,
  // not when its neighbours' new ring or the supervisor's shutdown timeout ends it.
  bool leave(const std::string& reason) {
    stop_training();
    return join_->leave(reason);
  }
  // The first half of leave(): the ring is given up and the worker takes no further step, but the
  // master is not told yet (a worker hands back its task first: await_hand_back).
  void stop_training() { view_.leave(); }  // the view at leave is the one before the master's answer
  // Waits until the worker's training loop has nothing to hand back (hand_back_pending(false)) or
  // `limit` passed; false then.
  bool await_hand_back(std::chrono::milliseconds limit);
  void hand_back_pending(bool pending) override;
  // Waits until the master's answer to leave() came (true), the master's connection was lost or
  // `limit` passed (false).
  bool await_left(std::chrono::milliseconds limit) { return join_->await_left(limit); }
  bool leaving() const override { return view_.leaving() || join_->leaving(); }
  bool stops_waiting() const override { return join_->leaving(); }
  cluster::membership_view view_at_leave() const override { return view_.view_at_leave(); }
  // Requested by leave(): the worker's rpc clients stop waiting for replies then (a PS shard that
  // stops with the job answers no pull), so the worker actor stops at once.
  std::stop_token leave_token() const { return join_->leave_token(); }

 private:
  node_runtime(job::job_spec spec, identity who);
  // Makes the parts (fault injector, membership client) and registers the frames to "node".
  expected<void> compose();
  // Frames to "node": membership views, and fault injections from `troupe chaos`.
  void on_node_message(const message& m);
  void on_membership(const message& m);
  void not_listed(const wire::membership_msg& msg);
  bool sent_by_master(const message& m, const wire::membership_msg& msg);
  // The error for a call made once net_ is gone.
  error shutting_down() const;
  // Whether the master's connection is up (false once net_ is gone).
  bool master_up();

  job::job_spec spec_;
  identity who_;
  struct caf_parts;
  std::unique_ptr<caf_parts> caf_;
  supervision::name_registry names_;
  std::unique_ptr<endpoint> net_;
  // Guards net_ for the calls actors make (send, connect, open_rpc, mark_ready): the destructor
  // takes net_ out under the unique lock before destroying it, so an actor that still handles a
  // message while the node shuts down gets an error, not a freed endpoint.
  mutable std::shared_mutex net_mu_;
  std::unique_ptr<collective::liveness> live_;
  std::string address_;
  std::string token_;  // the job's token (never logged)
  node_view view_;
  node_ring_listener ring_;
  std::unique_ptr<membership_client> join_;  // made by start(), once address_ is known
  std::unique_ptr<fault_injector> inject_;   // likewise; destroyed before net_
  // hand_back_pending(): whether the worker's loop has a task to hand back as it leaves.
  std::mutex hand_back_mu_;
  std::condition_variable hand_back_cv_;
  bool hand_back_pending_ = false;  // under hand_back_mu_
  std::mutex down_mu_;
  std::vector<std::function<void(const peer_event&)>> down_fns_;  // under down_mu_
  // Views sent by a node that is not the master (forged: anyone with the job's token can send one)
  // are refused; the log line is limited (the io thread's alone).
  log_limit refused_views_{5, std::chrono::seconds(10)};
};

}  // namespace troupe::actors
