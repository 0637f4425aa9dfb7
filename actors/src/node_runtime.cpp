#include "node_runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <fstream>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <thread>

#include "caf_types.hpp"
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
  {
    std::lock_guard lk(inject_mu_);
    inject_reset_ = {};  // joins: it may touch the endpoint
  }
  join_retry_ = {};
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
  auto net = endpoint::create(rt->who_.id, cfg);
  if (!net) return net.err();
  rt->net_ = std::move(*net);
  auto hp = parse_host_port(listen);
  if (!hp) return hp.err();
  auto bound = rt->net_->listen(hp->host, hp->port);
  if (!bound) return bound.err();
  rt->address_ = *bound;

  node_runtime* self = rt.get();
  if (auto r = rt->net_->register_name("node", [self](const message& m) { self->handle_membership(m); }); !r)
    return r.err();
  rt->net_->on_peer_down([self](const peer_event& e) {
    std::vector<std::function<void(const peer_event&)>> fns;
    {
      std::lock_guard lk(self->mu_);
      fns = self->down_fns_;
    }
    for (auto& f : fns) f(e);
  });
  return rt;
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

void node_runtime::handle_inject(const message& m) {
  wire::guarded("inject", [&] {
    auto in = m.body().getJob().getInject();
    fault_injection f;
    f.drop_probability = std::clamp(in.getDropProbability(), 0.0, 1.0);
    f.delay = std::chrono::microseconds(std::min<std::uint64_t>(in.getDelayUs(), 10'000'000));
    auto duration = std::chrono::milliseconds(std::min<std::uint64_t>(in.getDurationMs(), 3'600'000));
    spdlog::warn("fault injection from {}: drop {} delay {} us for {} ms", m.from_node().to_string(),
                 f.drop_probability, f.delay.count(), duration.count());
    net_->set_fault_injection(f);
    // The reset runs on its own thread: the io thread must not block. A newer inject replaces it.
    std::lock_guard lk(inject_mu_);
    inject_reset_ = std::jthread([this, duration](std::stop_token stop) {
      std::mutex mu;
      std::unique_lock lk(mu);
      std::condition_variable_any cv;
      cv.wait_for(lk, stop, duration, [] { return false; });
      net_->set_fault_injection(fault_injection{});
    });
  });
}

void node_runtime::handle_membership(const message& m) {
  if (m.kind() == schema::Envelope::Body::JOB) {
    bool is_inject = false;
    wire::guarded("node", [&] { is_inject = m.body().getJob().which() == schema::JobMessage::INJECT; });
    if (is_inject) handle_inject(m);
    return;
  }
  wire::guarded("membership", [&] {
    if (m.kind() != schema::Envelope::Body::MEMBERSHIP) return;
    auto msg = wire::read_membership(m.body().getMembership());
    {
      // A master older than the one this node follows (a hung master that woke up before it was
      // fenced) speaks for nobody: its views may not remove this node.
      std::lock_guard lk(mu_);
      if (msg.master_incarnation < master_incarnation_) {
        spdlog::warn("ignored membership epoch {} of a stale master (incarnation {} < {})", msg.view.epoch(),
                     msg.master_incarnation, master_incarnation_);
        return;
      }
    }
    // Views go to members only: one that does not list this incarnation means it was declared dead
    // (missed heartbeats) and refused on re-joining. It must not go on working unfenced.
    const auto* me = msg.view.find(who_.id.name);
    bool absent = !me || me->id.incarnation != who_.id.incarnation;
    if (absent && leaving_.stop_requested()) {  // the master's answer to leave(): its ring is rebuilt
      std::lock_guard lk(mu_);
      left_ = true;
      left_cv_.notify_all();
    } else if (who_.role != cluster::node_role::master && absent) {
      spdlog::critical("{} is not in membership epoch {} ({}): exiting so that a new incarnation replaces it",
                       who_.id.to_string(), msg.view.epoch(), msg.reason);
      spdlog::default_logger()->flush();
      std::_Exit(3);
    }
    {
      std::lock_guard lk(mu_);
      // Views only move forward, except that a restarted master starts a new sequence.
      bool newer_master = msg.master_incarnation > master_incarnation_;
      if (!newer_master && msg.view.epoch() <= view_.epoch()) return;
      master_incarnation_ = msg.master_incarnation;
      joined_ = !absent;
      view_ = msg.view;
      ring_epoch_.store(msg.ring_epoch, std::memory_order_release);
    }
    ring_changed_.notify_all();
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
  std::lock_guard lk(mu_);
  return view_;
}

std::pair<cluster::membership_view, std::uint64_t> node_runtime::view_and_ring_epoch() const {
  std::lock_guard lk(mu_);
  return {view_, ring_epoch_.load(std::memory_order_acquire)};
}

void node_runtime::wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) {
  std::unique_lock lk(mu_);
  troupe::wait_until(clock(), ring_changed_, lk, deadline,
                     [&] { return ring_epoch_.load(std::memory_order_acquire) != seen; });
}

void node_runtime::on_peer_down(std::function<void(const peer_event&)> fn) {
  std::lock_guard lk(mu_);
  down_fns_.push_back(std::move(fn));
}

expected<void> node_runtime::ensure_connected(const std::string& node, const std::string& address) {
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

expected<collective::tcp_listener*> node_runtime::ring_listener() {
  std::lock_guard lk(mu_);
  if (ring_listener_) return ring_listener_.get();
  auto host = address_.substr(0, address_.rfind(':'));
  auto l = collective::tcp_listener::open(host);
  if (!l) return l.err();
  ring_listener_ = std::move(*l);
  ring_address_ = host;
  ring_address_.append(":").append(std::to_string(ring_listener_->port()));
  return ring_listener_.get();
}

void node_runtime::send_join() {
  std::string ring_address;
  {
    std::lock_guard lk(mu_);
    ring_address = ring_address_;
  }
  auto j = wire::join(who_.id, who_.role, address_, static_cast<int>(::getpid()), ring_address);
  if (auto r = send("master", "master", std::move(j), "node"); !r)
    spdlog::warn("join: {}", r.err().to_string());
}

void node_runtime::mark_ready() {
  // A second join (peer_up raced with this) is harmless: the master ignores a member it has.
  if (leaving_.stop_requested()) return;  // a leaving node never joins again
  bool master_up = false;
  {
    std::shared_lock lk(net_mu_);
    master_up = net_ && net_->connected("master");
  }
  if (!ready_.exchange(true) && master_up) send_join();
}

void node_runtime::retry_join(std::stop_token stop) {
  std::mutex mu;
  std::unique_lock lk(mu);
  std::condition_variable_any cv;
  for (int unanswered = 0;;) {
    // With a stop token, wait_for returns the predicate's value whether or not stop was requested.
    cv.wait_for(lk, stop, std::chrono::milliseconds(250), [] { return false; });
    if (stop.stop_requested()) return;
    bool joined = false;
    {
      std::lock_guard g(mu_);
      joined = joined_;
    }
    if (joined || !ready_.load() || leaving_.stop_requested() || !net_->connected("master")) {
      unanswered = 0;
      continue;
    }
    // The first tick may race the join sent on peer_up and the master's answer to it.
    if (++unanswered < 2) continue;
    spdlog::info("no membership view from the master lists {} yet: joining again", who_.id.to_string());
    send_join();
  }
}

expected<void> node_runtime::join_master(const std::string& address, std::chrono::milliseconds timeout) {
  master_address_ = address;
  node_runtime* self = this;
  net_->on_peer_up([self](const peer_event& e) {
    if (e.node.name == "master" && self->ready_.load() && !self->leaving_.stop_requested()) self->send_join();
  });
  net_->on_peer_down([self](const peer_event& e) {
    if (e.node.name != "master") return;
    std::lock_guard lk(self->mu_);
    self->joined_ = false;
  });
  join_retry_ = std::jthread([this](std::stop_token stop) { retry_join(stop); });
  // The master may be restarting (killed, relaunched by the runner): keep dialling for a while
  // rather than exiting at once, which would only count as another death of this node.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (bool logged = false;;) {
    auto r = net_->connect(address, true);
    if (r) return {};
    if (std::chrono::steady_clock::now() >= deadline) return r.err();
    if (!logged) spdlog::info("master at {} not reachable yet ({}); retrying", address, r.err().to_string());
    logged = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace troupe::actors
