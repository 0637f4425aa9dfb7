#include "node_runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include "caf_types.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/collective/liveness.hpp"
#include "troupe/supervision/caf_errors.hpp"
#include "troupe/wire/job_token.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors {

struct node_runtime::caf_parts {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
};

node_runtime::node_runtime(job::job_spec spec, identity who)
    : spec_(std::move(spec)),
      who_(std::move(who)),
      live_(collective::make_host_liveness(who_.host_key.empty() ? who_.job_id : who_.host_key)) {}

node_runtime::~node_runtime() {
  inject_.reset();  // joins its reset: it may touch the endpoint
  if (join_) join_->stop();
  // The endpoint first: no callback may reach actors while the system shuts down. Actors still
  // running meanwhile may send: they get an error (send()).
  std::unique_ptr<endpoint> net;
  {
    std::unique_lock lk(net_mu_);
    net = std::move(net_);
  }
  net.reset();
  if (caf_ && caf_->system) {
    caf_->system->await_all_actors_done();
  }
}

caf::actor_system& node_runtime::system() {
  return *caf_->system;
}

expected<std::unique_ptr<node_runtime>> node_runtime::start(const job::job_spec& spec, identity who,
                                                            const std::string& listen) {
  std::unique_ptr<node_runtime> rt(new node_runtime(spec, std::move(who)));
  rt->caf_ = std::make_unique<caf_parts>();
  rt->caf_->cfg.set("scheduler.max-threads", 2);
  // An idle scheduler thread goes straight from its short spin to a condition-variable wait (it is
  // notified on new work), instead of CAF's default of waking every 50 us for 25 ms after each
  // message: with a handful of nodes on a few cores those wake-ups stole the training threads' time.
  rt->caf_->cfg.set("work-stealing.moderate-poll-attempts", 0);
  supervision::add_supervision_error_category(rt->caf_->cfg);
  rt->caf_->system = std::make_unique<caf::actor_system>(rt->caf_->cfg);

  auto cfg = spec.transport;
  auto token = wire::read_job_token(rt->who_.job_dir);
  if (!token) return token.err();
  cfg.token = *token;
  rt->token_ = *token;
  auto net = endpoint::create(rt->who_.id, cfg);
  if (!net) return net.err();
  rt->net_ = std::move(*net);
  auto hp = parse_host_port(listen);
  if (!hp) return hp.err();
  auto bound = rt->net_->listen(hp->host, hp->port);
  if (!bound) return bound.err();
  rt->address_ = *bound;

  if (auto c = rt->compose(); !c) return c.err();
  return rt;
}

// The node's parts over its endpoint (listening: address_ is known), and the frames to "node".
expected<void> node_runtime::compose() {
  inject_ = std::make_unique<fault_injector>(*net_);
  node_runtime* self = this;
  membership_client::links links{
      [self](outbound&& m) { return self->send("master", "master", std::move(m), "node"); },
      [self] { return self->master_up(); }, [self] { return self->ring_.address(); }};
  join_ = std::make_unique<membership_client>(who_, address_, view_, std::move(links));
  if (auto r = net_->register_name("node", [self](const message& m) { self->on_node_message(m); }); !r)
    return r.err();
  net_->on_peer_down([self](const peer_event& e) {
    std::vector<std::function<void(const peer_event&)>> fns;
    {
      std::lock_guard lk(self->down_mu_);
      fns = self->down_fns_;
    }
    for (auto& f : fns) f(e);
  });
  return {};
}

expected<void> node_runtime::bridge(const std::string& name) {
  auto* names = &names_;
  return net_->register_name(name, [names, name](const message& m) {
    auto a = names->get(name);
    if (a)
      caf::anon_send(a, m);
    else
      spdlog::debug("{} is restarting: dropped a message from {}", name, m.from_node().to_string());
  });
}

void node_runtime::on_node_message(const message& m) {
  bool is_inject = false;
  if (m.kind() == schema::Envelope::Body::JOB)
    wire::guarded("node", [&] { is_inject = m.body().getJob().which() == schema::JobMessage::INJECT; });
  if (is_inject)
    inject_->handle(m);
  else if (m.kind() == schema::Envelope::Body::MEMBERSHIP)
    on_membership(m);
}

// Only the master sends views, each naming its own incarnation: one from another node (a forged view
// listing this node alone wedged a worker for good; one leaving it out ended it) is refused.
bool node_runtime::sent_by_master(const message& m, const wire::membership_msg& msg) {
  const auto from = m.from_node();
  if (from.name == "master" && from.incarnation == msg.master_incarnation) return true;
  auto v = refused_views_.note(clock().now());
  if (!v.summary.empty()) spdlog::warn("{}", v.summary);
  if (v.log)
    spdlog::warn("refused membership epoch {} from {}: views come from the master (incarnation {})",
                 msg.epoch, from.to_string(), msg.master_incarnation);
  return false;
}

// A view that does not list this incarnation: the master's answer to its leave, or it was refused
// (declared dead, or no worker slot left): it must not go on working unfenced.
void node_runtime::not_listed(const wire::membership_msg& msg) {
  if (join_->leaving()) {
    join_->left();  // the master's answer to leave(): its ring is rebuilt
  } else if (who_.role == cluster::node_role::worker &&
             msg.reason.find(cluster::no_worker_slot) != std::string::npos) {
    spdlog::error("{}: the master has no worker slot for it ({}): exiting; the runner does not relaunch it",
                  who_.id.to_string(), msg.reason);
    spdlog::default_logger()->flush();
    std::_Exit(cluster::exit_no_worker_slot);
  } else if (who_.role != cluster::node_role::master) {
    spdlog::critical("{} is not in membership epoch {} ({}): exiting so that a new incarnation replaces it",
                     who_.id.to_string(), msg.view.epoch(), msg.reason);
    spdlog::default_logger()->flush();
    std::_Exit(3);
  }
}

void node_runtime::on_membership(const message& m) {
  wire::guarded("membership", [&] {
    auto msg = wire::read_membership(m.body().getMembership());
    if (!sent_by_master(m, msg)) return;
    if (!view_.from_current_master(msg)) {
      // A master older than the one this node follows (a hung master that woke up before it was
      // fenced) speaks for nobody: its views may not remove this node.
      spdlog::warn("ignored membership epoch {} of a stale master (incarnation {} < {})", msg.epoch,
                   msg.master_incarnation, view_.master_incarnation());
      return;
    }
    if (msg.delta()) {
      auto whole = view_.expand(msg);
      if (!whole) {
        // A view was missed (a frame lost with a connection): the master sends the whole one.
        if (msg.master_incarnation != view_.master_incarnation() || msg.epoch > view_.epoch()) {
          spdlog::info("membership delta {} -> {} does not apply to the view held: asking for the whole view",
                       msg.base_epoch, msg.epoch);
          join_->request_view();
        }
        return;
      }
      msg.view = std::move(*whole);
    }
    // Views go to members only: one that does not list this incarnation means it was declared dead
    // (missed heartbeats) and refused on re-joining. It must not go on working unfenced.
    const auto* me = msg.view.find(who_.id.name);
    bool listed = me && me->id.incarnation == who_.id.incarnation;
    if (!listed) not_listed(msg);
    if (view_.take(msg, listed))
      spdlog::debug("membership epoch {} ring epoch {} ({})", msg.view.epoch(), msg.ring_epoch, msg.reason);
  });
}

expected<void> node_runtime::send(const std::string& node, const std::string& to, outbound&& m,
                                  const std::string& from) {
  std::shared_lock lk(net_mu_);
  if (!net_) return shutting_down();
  return net_->send(node, to, std::move(m), from);
}

error node_runtime::shutting_down() const {
  return error(std::error_code(core_errc::io_error), "node " + who_.id.name + " is shutting down");
}

std::vector<node_id> node_runtime::peers() const {
  std::shared_lock lk(net_mu_);
  return net_ ? net_->peers() : std::vector<node_id>{};
}

void node_runtime::hand_back_pending(bool pending) {
  {
    std::lock_guard lk(hand_back_mu_);
    hand_back_pending_ = pending;
  }
  hand_back_cv_.notify_all();
}

bool node_runtime::await_hand_back(std::chrono::milliseconds limit) {
  std::unique_lock lk(hand_back_mu_);
  return hand_back_cv_.wait_for(lk, limit, [this] { return !hand_back_pending_; });
}

bool node_runtime::gone(const node_id& id) const {
  return live_->gone(id);
}

void node_runtime::forget(const node_id& id) {
  if (live_->gone(id)) live_->remove(id);
}

troupe::clock& node_runtime::clock() {
  return troupe::clock::system();
}

cluster::membership_view node_runtime::view() const {
  return view_.view();
}

std::pair<cluster::membership_view, std::uint64_t> node_runtime::view_and_ring_epoch() const {
  return view_.view_and_ring_epoch();
}

void node_runtime::wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) {
  view_.wait_ring_change(seen, deadline, clock());
}

void node_runtime::on_peer_down(std::function<void(const peer_event&)> fn) {
  std::lock_guard lk(down_mu_);
  down_fns_.push_back(std::move(fn));
}

expected<void> node_runtime::connect(const std::string& node, const std::string& address) {
  std::shared_lock lk(net_mu_);
  if (!net_) return shutting_down();
  if (net_->connected(node)) return {};
  auto r = net_->connect(address, true);
  if (!r) return r.err();
  if (r->name != node)
    return make_unexpected(core_errc::invalid_argument,
                           address + " is " + r->to_string() + ", expected " + node);
  return {};
}

expected<std::unique_ptr<wire::rpc_channel>> node_runtime::open_rpc(const std::string& name) {
  std::shared_lock lk(net_mu_);
  if (!net_) return shutting_down();
  net_->unregister_name(name);
  auto rpc = wire::rpc_client::create(*net_, name, clock(), leave_token());
  if (!rpc) return rpc.err();
  return std::unique_ptr<wire::rpc_channel>(std::move(*rpc));
}

bool node_runtime::master_up() {
  std::shared_lock lk(net_mu_);
  return net_ && net_->connected("master");
}

expected<collective::tcp_listener*> node_runtime::ring_listener() {
  return ring_.open(address_);
}

expected<void> node_runtime::join_master(const std::string& address, std::chrono::milliseconds timeout) {
  membership_client* join = join_.get();
  net_->on_peer_up([join](const peer_event& e) {
    if (e.node.name == "master") join->master_up();
  });
  net_->on_peer_down([join](const peer_event& e) {
    if (e.node.name == "master") join->master_down();
  });
  join->start_rejoining();
  // The master may be restarting (killed, relaunched by the runner): keep dialling for a while
  // rather than exiting at once, which would only count as another death of this node.
  // Nothing tells this process when the master starts to listen, so a refused dial is retried after
  // a pause of at most 50 ms (on the node's clock) until the deadline.
  auto deadline = clock().now() + timeout;
  for (bool logged = false;;) {
    auto r = net_->connect(address, true);
    if (r) return {};
    auto now = clock().now();
    if (now >= deadline) return r.err();
    if (!logged) spdlog::info("master at {} not reachable yet ({}); retrying", address, r.err().to_string());
    logged = true;
    clock().sleep_for(std::min<troupe::clock::duration>(deadline - now, std::chrono::milliseconds(50)));
  }
}

}  // namespace troupe::actors
