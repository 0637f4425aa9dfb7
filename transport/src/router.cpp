// Connection events, routing of frames to handlers, watches, and send().
#include <random>

#include <kj/exception.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "endpoint_impl.hpp"
#include "troupe/core/client_node.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {

namespace asio = detail::asio;
using Body = schema::Envelope::Body;

namespace {
// A connection is kept when it was dialled by the smaller of the two node names, so both ends of
// a simultaneous dial agree on which one survives.
std::string dialler(const endpoint::impl::conn_ptr& c, const node_id& self) {
  return c->dialled() ? self.name : c->peer().name;
}

// A command-line client (`troupe status` polls) comes and goes all the time: not news for the log.
// "transport: peer worker-1#0 up (127.0.0.1:5000)", "... down: <reason>".
void log_peer(const node_id& peer, bool quiet, const std::string& what) {
  const auto level = quiet || is_client_node(peer.name) ? spdlog::level::debug : spdlog::level::info;
  spdlog::log(level, "transport: peer {} {}", peer.to_string(), what);
}
}  // namespace

void endpoint::impl::on_open(const conn_ptr& c) {
  c->opened = true;
  conn_ptr old;
  {
    std::lock_guard lk(conns_mu);
    auto it = primary.find(c->peer().name);
    conn_ptr cur = it == primary.end() ? nullptr : it->second;
    bool take = true;
    if (cur && cur->peer().incarnation == c->peer().incarnation) {
      take = dialler(c, self) < dialler(cur, self);
      old = take ? cur : c;
      old->superseded = true;
    } else {
      old = cur;  // a previous incarnation (or none): the new connection replaces it
    }
    if (take) {  // the key is a view of the primary's own name: it goes with the connection
      if (it != primary.end()) primary.erase(it);
      primary.emplace(c->peer().name, c);
    }
  }
  const bool duplicate = old && old->superseded;
  if (duplicate)
    old->close("superseded by another connection to " + c->peer().name);
  else if (old)
    old->close("replaced by incarnation " + std::to_string(c->peer().incarnation));
  if (!duplicate) {
    log_peer(c->peer(), quiet_peers, "up (" + c->remote() + ")");
    fire_peer(up_cbs, peer_event{c->peer(), c->remote(), "connected"});
  }
  // The dialler learns of success only now, when send() to the peer can find the connection.
  if (auto it = dials.find(c->dial_id); it != dials.end()) {
    it->second.attempts = 0;
    it->second.established = true;
    it->second.node = c->peer().name;
    if (auto w = std::move(it->second.waiter)) {
      it->second.waiter = nullptr;
      w(c->peer());
    }
  }
}

void endpoint::impl::on_closed(const conn_ptr& c, const std::string& reason) {
  forget(c);
  if (!c->opened) {
    if (!c->dialled())
      refused_warning.warn("transport: refused connection from " + c->remote() + ": " + reason);
    else
      spdlog::warn("transport: dial {} failed: {}", c->remote(), reason);
    if (c->dial_id) dial_failed(c->dial_id, error(c->close_code(), c->remote() + ": " + reason));
    return;
  }
  bool was_primary = false;
  {
    std::lock_guard lk(conns_mu);
    auto it = primary.find(c->peer().name);
    if (it != primary.end() && it->second == c) {
      primary.erase(it);
      was_primary = true;
    }
  }
  if (c->close_code() == transport_errc::malformed_frame)
    frame_warning.warn("transport: closed connection to " + c->peer().to_string() + " (" + c->remote() +
                       "): " + reason);
  if (!was_primary) return;
  for (auto& [name, list] : watchers)
    std::erase_if(list, [&](const remote_watch& w) { return w.node == c->peer().name; });
  log_peer(c->peer(), quiet_peers, "down: " + reason);
  fire_watches(c->peer().name, "", "node down: " + reason);
  fire_peer(down_cbs, peer_event{c->peer(), c->remote(), reason});
  if (stopping) return;
  // Re-dial what we dialled, also when the lost connection was the peer's (ours was superseded).
  for (auto& [id, d] : dials) {
    if (d.reconnect && d.established && (id == c->dial_id || d.node == c->peer().name)) {
      schedule_redial(id);
      break;
    }
  }
}

void endpoint::impl::fire_peer(const std::vector<peer_callback>& cbs, const peer_event& ev) {
  for (auto& cb : cbs) {
    try {
      cb(ev);
    } catch (const std::exception& e) {
      spdlog::error("transport: peer callback threw: {}", e.what());
    }
  }
}

void endpoint::impl::on_message(const conn_ptr& c, message&& m) {
  switch (m.kind()) {
    case Body::WATCH:
      return handle_watch(c, m);
    case Body::UNWATCH: {
      auto id = m.body().getUnwatch().getWatchId();
      for (auto& [name, list] : watchers)
        std::erase_if(list, [&](const remote_watch& w) { return w.node == c->peer().name && w.id == id; });
      return;
    }
    case Body::DOWN:
      return handle_down(c, m);
    case Body::HELLO:
    case Body::AUTH:
      ++stats.malformed_frames;
      return c->close("malformed frame: handshake message after authentication",
                      transport_errc::malformed_frame);
    default:
      return route(m, c);
  }
}

void endpoint::impl::route(const message& m, const conn_ptr& c) {
  std::shared_ptr<message_handler> h;
  {
    std::lock_guard lk(names_mu);
    if (auto it = handlers.find(std::string(m.to())); it != handlers.end()) h = it->second;
  }
  if (!h) {
    ++stats.frames_unroutable;
    spdlog::debug("transport: no handler for '{}' (from {})", m.to(), m.from_node().to_string());
    return;
  }
  try {
    (*h)(m);
  } catch (const kj::Exception& e) {
    ++stats.malformed_frames;
    if (c)
      c->close("malformed message for '" + std::string(m.to()) + "': " + e.getDescription().cStr(),
               transport_errc::malformed_frame);
  } catch (const std::exception& e) {
    spdlog::error("transport: handler '{}' threw on a message from {}: {}", m.to(), m.from_node().to_string(),
                  e.what());
  }
}

void endpoint::impl::handle_watch(const conn_ptr& c, const message& m) {
  auto w = m.body().getWatch();
  std::string name = w.getName();
  if (has_name(name)) {
    watchers[name].push_back({c->peer().name, w.getWatchId()});
  } else {
    send_down(c->peer().name, w.getWatchId(), name, "not registered");
  }
}

void endpoint::impl::handle_down(const conn_ptr& c, const message& m) {
  auto d = m.body().getDown();
  auto it = watches.find(d.getWatchId());
  if (it == watches.end() || it->second.node != c->peer().name) return;
  auto w = std::move(it->second);
  watches.erase(it);
  try {
    w.cb(actor_address{c->peer(), w.name}, std::string(d.getReason().cStr()));
  } catch (const std::exception& e) {
    spdlog::error("transport: watch callback threw: {}", e.what());
  }
}

void endpoint::impl::send_down(const std::string& node, std::uint64_t id, const std::string& name,
                               const std::string& why) {
  auto c = primary_for(node);
  if (!c) return;
  outbound o(64);
  auto d = o.body().initDown();
  d.setWatchId(id);
  d.setName(name);
  d.setReason(why);
  (void)c->enqueue(std::move(o));
}

// Fires (and removes) the watches on `node`: those of `name`, or all of them when name is empty.
void endpoint::impl::fire_watches(const std::string& node, const std::string& name,
                                  const std::string& reason) {
  std::vector<local_watch> fired;
  for (auto it = watches.begin(); it != watches.end();) {
    if (it->second.node == node && (name.empty() || it->second.name == name)) {
      fired.push_back(std::move(it->second));
      it = watches.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : fired) {
    try {
      w.cb(actor_address{node_id{w.node, 0}, w.name}, reason);
    } catch (const std::exception& e) {
      spdlog::error("transport: watch callback threw: {}", e.what());
    }
  }
}

void endpoint::impl::start_watch(std::uint64_t id, local_watch w) {
  const std::string node = w.node, name = w.name;
  if (node == self.name) {
    if (!has_name(name)) return w.cb(actor_address{self, name}, "not registered");
    watches.emplace(id, std::move(w));
    return;
  }
  auto c = primary_for(node);
  if (!c) return w.cb(actor_address{node_id{node, 0}, name}, "node not connected");
  watches.emplace(id, std::move(w));
  outbound o(64);
  auto wm = o.body().initWatch();
  wm.setWatchId(id);
  wm.setName(name);
  if (!c->enqueue(std::move(o))) fire_watches(node, name, "node not connected");
}

std::uint64_t endpoint::watch(const std::string& node, const std::string& name, watch_callback cb) {
  const std::uint64_t id = impl_->next_id++;
  asio::post(impl_->io, [p = impl_.get(), id, w = impl::local_watch{node, name, std::move(cb)}]() mutable {
    try {
      p->start_watch(id, std::move(w));
    } catch (const std::exception& e) {
      spdlog::error("transport: watch callback threw: {}", e.what());
    }
  });
  return id;
}

void endpoint::unwatch(std::uint64_t id) {
  asio::post(impl_->io, [p = impl_.get(), id] {
    auto it = p->watches.find(id);
    if (it == p->watches.end()) return;
    auto node = it->second.node;
    p->watches.erase(it);
    if (auto c = p->primary_for(node)) {
      outbound o(16);
      o.body().initUnwatch().setWatchId(id);
      (void)c->enqueue(std::move(o));
    }
  });
}

expected<void> endpoint::send(const std::string& node, const std::string& to, outbound&& m,
                              const std::string& from, std::chrono::milliseconds wait) {
  // The receiver treats a bad name as a malformed frame and drops the connection: refuse it here.
  if (!valid_actor_name(to) || (!from.empty() && !valid_actor_name(from)))
    return make_unexpected(transport_errc::bad_name,
                           "actor name '" + (valid_actor_name(to) ? from : to) + "'");
  auto env = m.envelope();
  env.setTo(to);
  if (!from.empty()) env.setFrom(from);
  if (node == impl_->self.name) {
    auto lm = loopback_message(m, impl_->self);
    if (!lm) return std::move(lm).err();
    asio::post(impl_->io, [p = impl_.get(), lm = std::move(*lm)] { p->route(lm, nullptr); });
    return {};
  }
  if (double pd = impl_->drop_probability.load(); pd > 0) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    if (std::uniform_real_distribution<double>(0, 1)(rng) < pd) {
      ++impl_->stats.frames_dropped;
      return {};
    }
  }
  auto c = impl_->primary_for(node);
  if (!c) return make_unexpected(transport_errc::not_connected, "node " + node);
  if (auto d = impl_->delay_us.load(); d > 0) {
    auto t = std::make_shared<asio::steady_timer>(impl_->io, std::chrono::microseconds(d));
    auto held = std::make_shared<outbound>(std::move(m));
    t->async_wait([t, held, c](const boost::system::error_code& ec) {
      if (!ec) (void)c->enqueue(std::move(*held));
    });
    return {};
  }
  return c->enqueue(std::move(m), wait);
}

}  // namespace troupe
