// Endpoint lifecycle and public API. Dialling is in dial.cpp, routing and watches in router.cpp.
#include <algorithm>
#include <future>

#include <spdlog/spdlog.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>

#include "endpoint_impl.hpp"
#include "endpoint_testing.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {

using detail::asio::ip::tcp;
namespace asio = detail::asio;

namespace {
// Runs fn on the io thread and waits for its result (callers are never the io thread).
template <class T, class Fn>
T run_on_io(asio::io_context& io, Fn fn) {
  std::promise<T> p;
  auto f = p.get_future();
  asio::post(io, [&] { p.set_value(fn()); });
  return f.get();
}
}  // namespace

detail::io_runner::io_runner() {
  work.emplace(io.get_executor());
  thread = std::thread([this] {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("transport: io thread: unexpected exception: {}", e.what());
      }
    }
  });
}

detail::io_runner::~io_runner() {
  work.reset();
  io.stop();
  if (thread.joinable()) thread.join();
}

io_group::io_group(unsigned threads) : impl_(std::make_unique<impl>()) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i)
    impl_->runners.push_back(std::make_shared<detail::io_runner>());
}

io_group::~io_group() = default;

endpoint::impl::impl(node_id s, transport_config c, std::shared_ptr<detail::io_runner> r, troupe::clock& k)
    : runner(std::move(r)), io(runner->io), clk(k), self(std::move(s)), cfg(std::move(c)) {
  params->clock = &clk;
  params->owner = this;
  params->self = self;
  params->key = detail::derive_key(cfg.token);
  params->limits = cfg.limits;
  params->heartbeat_interval = cfg.heartbeat_interval;
  params->heartbeat_timeout = cfg.heartbeat_timeout;
  params->handshake_timeout = cfg.handshake_timeout;
  params->queue_bytes = cfg.send_queue_bytes;
  params->stats = &stats;
  constexpr std::size_t read_buffer_bytes = 64 * 1024;
  read_buffer = std::make_unique_for_overwrite<std::byte[]>(read_buffer_bytes);
  params->read_buffer = {read_buffer.get(), read_buffer_bytes};
}

expected<std::unique_ptr<endpoint>> endpoint::create(node_id self, transport_config cfg, io_group* group,
                                                     troupe::clock& clk) {
  if (!valid_node_name(self.name))
    return make_unexpected(transport_errc::bad_name, "node name '" + self.name + "'");
  if (auto v = cfg.validate(); !v) return std::move(v).err();
  std::shared_ptr<detail::io_runner> runner;
  if (group) {
    auto& g = *group->impl_;
    runner = g.runners[g.next++ % g.runners.size()];
  } else {
    runner = std::make_shared<detail::io_runner>();
  }
  auto p = std::make_unique<impl>(std::move(self), std::move(cfg), std::move(runner), clk);
  return std::unique_ptr<endpoint>(new endpoint(std::move(p)));
}

endpoint::endpoint(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

endpoint::~endpoint() {
  impl_->stopping = true;
  // Close everything on the io thread, then wait until the completions that closing queued (aborted
  // reads, writes, timers, accepts and connects, each holding this endpoint's state) have run:
  // they were queued before the marker, and anything they post in turn before its second hop. The
  // io thread may go on serving other endpoints (io_group), so nothing of ours may be left on it.
  std::promise<void> drained;
  asio::post(impl_->io, [p = impl_.get(), &drained] {
    p->shutdown_all();
    asio::post(p->io, [p, &drained] { asio::post(p->io, [&drained] { drained.set_value(); }); });
  });
  drained.get_future().wait();
  impl_.reset();  // the io thread last (runner): joined here unless an io_group shares it
}

void endpoint::impl::shutdown_all() {
  boost::system::error_code ec;
  for (auto& l : acceptors) {
    l->acceptor.close(ec);
    l->pause.cancel();
  }
  for (auto& [id, d] : dials) {
    if (d.timer) d.timer->cancel();
    if (d.sock) d.sock->close(ec);  // a connect on its way completes now, aborted
  }
  for (auto& [id, d] : dials)
    if (d.waiter) d.waiter(make_unexpected(transport_errc::closed, "endpoint shut down"));
  dials.clear();
  sweep_timer.cancel();
  auto copy = all;
  for (auto& c : copy) c->close("endpoint shut down");
  for (auto* w : {&refused_warning, &frame_warning, &accept_warning}) w->flush();
}

const node_id& endpoint::self() const {
  return impl_->self;
}

expected<std::string> endpoint::listen(const std::string& host, std::uint16_t port) {
  if (in_io_thread()) return make_unexpected(transport_errc::wrong_thread, "listen");
  return run_on_io<expected<std::string>>(impl_->io, [&]() -> expected<std::string> {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec)
      return make_unexpected(transport_errc::bad_address, "listen host '" + host + "': " + ec.message());
    auto l = std::make_unique<impl::listener>(impl_->io);
    auto& a = l->acceptor;
    tcp::endpoint ep(addr, port);
    a.open(ep.protocol(), ec);
    if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) a.bind(ep, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return make_unexpected(transport_errc::listen_failed,
                             host + ":" + std::to_string(port) + ": " + ec.message());
    auto bound = a.local_endpoint(ec);
    std::string where = host + ":" + std::to_string(bound.port());
    impl_->accept_next(*l);
    impl_->acceptors.push_back(std::move(l));
    spdlog::info("transport: node {} listening on {}", impl_->self.to_string(), where);
    return where;
  });
}

// Inbound connections still in their handshake (strangers until their Hello checks out).
std::size_t endpoint::impl::inbound_handshakes() const {
  std::size_t n = 0;
  for (const auto& c : all) n += !c->dialled() && c->state() == detail::connection::phase::handshake;
  return n;
}

void endpoint::impl::accept_next(listener& l) {
  l.acceptor.async_accept(io, [this, &l](const boost::system::error_code& ec, detail::socket_type sock) {
    if (ec == asio::error::operation_aborted || stopping) return;
    if (ec) {
      // Out of descriptors (EMFILE) the connection stays in the backlog and accepting again at once
      // fails again: a busy loop of millions a second. A pause lets closing connections free some.
      accept_warning.warn("transport: accept failed: " + ec.message());
      l.pause.expires_after(std::chrono::milliseconds(100));
      l.pause.async_wait([this, &l](const boost::system::error_code& e) {
        if (!e && !stopping) accept_next(l);
      });
      return;
    }
    boost::system::error_code e2;
    auto rem = sock.remote_endpoint(e2);
    std::string remote = e2 ? "?" : rem.address().to_string() + ":" + std::to_string(rem.port());
    // Silent strangers hold a descriptor each until their handshake times out: a flood of them ran a
    // master and its PS shards out of descriptors (checkpoints and counters.json failed to open).
    // Past the cap a new one is closed at once; a node refused so dials again (its backoff).
    if (inbound_handshakes() >= max_inbound_handshakes) {
      refused_warning.warn("transport: " + remote + " refused: " + std::to_string(max_inbound_handshakes) +
                           " connections are still in their handshake");
      sock.close(e2);
    } else {
      add(std::make_shared<detail::connection>(std::move(sock), params, false, remote));
    }
    accept_next(l);
  });
}

void endpoint::impl::add(const conn_ptr& c) {
  c->slot = static_cast<std::uint32_t>(all.size());
  all.push_back(c);
  c->start();
  if (!sweeping) arm_sweep();
}

void endpoint::impl::forget(const conn_ptr& c) {
  if (c->slot >= all.size() || all[c->slot] != c) return;
  all.back()->slot = c->slot;
  all[c->slot] = std::move(all.back());
  all.pop_back();
}

// The heartbeat sweep runs while the endpoint has connections. Its period is each connection's
// old timer's: the heartbeat interval, or a quarter of the timeout when that is shorter.
void endpoint::impl::arm_sweep() {
  auto tick = std::min(cfg.heartbeat_interval, cfg.heartbeat_timeout / 4);
  if (tick.count() < 1) tick = std::chrono::milliseconds(1);
  sweeping = true;
  sweep_timer.expires_after(tick);
  sweep_timer.async_wait([this](const boost::system::error_code& ec) {
    sweeping = false;
    if (ec || stopping) return;
    // A tick may close its connection or, through the owner's callbacks, others; on_closed takes
    // each out of `all` by moving the last into its place, and new ones go at the end. Walked from
    // the end, no connection is missed (one moved from behind may get a second tick, which finds
    // nothing due), and no copy of the list is made per tick; each is held while it ticks.
    const auto now = clk.now();
    for (std::size_t i = all.size(); i-- > 0;) {
      if (i >= all.size()) continue;
      const auto c = all[i];
      c->tick(now);
    }
    if (!all.empty()) arm_sweep();
  });
}

bool endpoint::connected(const std::string& node) const {
  return impl_->primary_for(node) != nullptr;
}

std::vector<node_id> endpoint::peers() const {
  std::lock_guard lk(impl_->conns_mu);
  std::vector<node_id> out;
  for (auto& [name, c] : impl_->primary) out.push_back(c->peer());
  return out;
}

endpoint::impl::conn_ptr endpoint::impl::primary_for(const std::string& node) const {
  std::lock_guard lk(conns_mu);
  auto it = primary.find(node);
  return it == primary.end() ? nullptr : it->second;
}

bool endpoint::impl::has_name(const std::string& name) const {
  std::lock_guard lk(names_mu);
  return handlers.count(name) != 0;
}

expected<void> endpoint::register_name(const std::string& name, message_handler h) {
  if (!valid_actor_name(name)) return make_unexpected(transport_errc::bad_name, "actor name '" + name + "'");
  std::lock_guard lk(impl_->names_mu);
  if (!impl_->handlers.emplace(name, std::make_shared<message_handler>(std::move(h))).second)
    return make_unexpected(transport_errc::name_taken, name + "@" + impl_->self.name);
  return {};
}

void endpoint::unregister_name(const std::string& name) {
  {
    std::lock_guard lk(impl_->names_mu);
    if (impl_->handlers.erase(name) == 0) return;
  }
  asio::post(impl_->io, [p = impl_.get(), name] {
    auto it = p->watchers.find(name);
    if (it != p->watchers.end()) {
      auto list = std::move(it->second);
      p->watchers.erase(it);
      for (auto& w : list) p->send_down(w.node, w.id, name, "unregistered");
    }
    p->fire_watches(p->self.name, name, "unregistered");
  });
}

void endpoint::on_peer_up(peer_callback cb) {
  asio::post(impl_->io,
             [p = impl_.get(), cb = std::move(cb)]() mutable { p->up_cbs.push_back(std::move(cb)); });
}
void endpoint::on_peer_down(peer_callback cb) {
  asio::post(impl_->io,
             [p = impl_.get(), cb = std::move(cb)]() mutable { p->down_cbs.push_back(std::move(cb)); });
}

void endpoint::quiet_peer_lines() {
  impl_->quiet_peers = true;
}

void endpoint::set_fault_injection(const fault_injection& f) {
  impl_->drop_probability = f.drop_probability;
  impl_->delay_us = f.delay.count();
}

endpoint_stats endpoint::stats() const {
  endpoint_stats s;
  auto& st = impl_->stats;
  s.bytes_sent = st.bytes_sent;
  s.bytes_received = st.bytes_received;
  s.frames_sent = st.frames_sent;
  s.frames_received = st.frames_received;
  s.frames_dropped = st.frames_dropped;
  s.frames_unroutable = st.frames_unroutable;
  s.malformed_frames = st.malformed_frames;
  s.auth_refused = st.auth_refused;
  s.queued_bytes = st.queued_bytes;
  std::lock_guard lk(impl_->conns_mu);
  s.open_connections = impl_->primary.size();
  return s;
}

void endpoint::post(std::function<void()> fn) {
  asio::post(impl_->io, [fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("transport: posted function threw: {}", e.what());
    }
  });
}

bool endpoint::in_io_thread() const {
  return impl_->io.get_executor().running_in_this_thread();
}

expected<void> endpoint_testing::send_raw(endpoint& e, const std::string& node,
                                          std::vector<std::byte> bytes) {
  auto c = e.impl_->primary_for(node);
  if (!c) return make_unexpected(transport_errc::not_connected, node);
  return c->enqueue_raw(std::move(bytes));
}

void endpoint_testing::limit_direct_writes(endpoint& e, std::size_t bytes) {
  run_on_io<bool>(e.impl_->io, [&] {
    e.impl_->params->direct_write_limit = bytes;
    return true;
  });
}

}  // namespace troupe
