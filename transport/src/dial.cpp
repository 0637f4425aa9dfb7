// Dialling: endpoint::connect, a dial's TCP connect under connect_timeout, and re-dialling with
// backoff after a drop. The handshake that follows is the connection's (connection_handshake.cpp).
#include <future>
#include <random>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "endpoint_impl.hpp"

namespace troupe {

using detail::asio::ip::tcp;
namespace asio = detail::asio;

expected<node_id> endpoint::connect(const std::string& address, bool reconnect) {
  if (in_io_thread()) return make_unexpected(transport_errc::wrong_thread, "connect " + address);
  auto hp = parse_host_port(address);
  if (!hp) return std::move(hp).err();
  auto prom = std::make_shared<std::promise<expected<node_id>>>();
  auto fut = prom->get_future();
  const std::uint64_t id = impl_->next_id++;
  asio::post(impl_->io, [p = impl_.get(), id, address, reconnect, prom] {
    if (p->stopping) return prom->set_value(make_unexpected(transport_errc::closed, "endpoint shut down"));
    auto& d = p->dials[id];
    d.address = address;
    d.reconnect = reconnect && p->cfg.reconnect_attempts > 0;
    d.waiter = [prom](expected<node_id> r) { prom->set_value(std::move(r)); };
    p->start_dial(id);
  });
  const auto limit =
      impl_->cfg.connect_timeout + impl_->cfg.handshake_timeout + std::chrono::milliseconds(500);
  // Waits on the future in slices, so that a manual clock moved past the limit ends the wait.
  const auto deadline = impl_->clk.now() + limit;
  bool ready = false;
  while (!(ready = fut.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready))
    if (impl_->clk.now() >= deadline) break;
  if (!ready) {
    asio::post(impl_->io, [p = impl_.get(), id] {
      if (auto it = p->dials.find(id); it != p->dials.end() && !it->second.established) p->dials.erase(it);
    });
    return make_unexpected(transport_errc::timeout, "connect " + address);
  }
  return fut.get();
}

void endpoint::impl::start_dial(std::uint64_t id) {
  auto it = dials.find(id);
  if (it == dials.end() || stopping) return;
  auto hp = parse_host_port(it->second.address);
  boost::system::error_code ec;
  auto addr =
      hp ? asio::ip::make_address(hp->host == "localhost" ? "127.0.0.1" : hp->host, ec) : asio::ip::address();
  if (!hp || ec) return dial_failed(id, error(transport_errc::bad_address, it->second.address));
  auto sock = std::make_shared<detail::socket_type>(io);
  it->second.sock = sock;
  auto timer = std::make_shared<asio::steady_timer>(io, cfg.connect_timeout);
  timer->async_wait([sock](const boost::system::error_code& e) {
    if (!e) {
      boost::system::error_code ignored;
      sock->close(ignored);
    }
  });
  sock->async_connect(tcp::endpoint(addr, hp->port), [this, id, sock,
                                                      timer](const boost::system::error_code& e) {
    timer->cancel();
    auto d = dials.find(id);
    if (d != dials.end()) d->second.sock.reset();
    if (e)
      return dial_failed(id, error(transport_errc::connect_failed,
                                   d != dials.end() ? d->second.address + ": " + e.message() : e.message()));
    on_tcp_connected(id, std::move(*sock));
  });
}

void endpoint::impl::on_tcp_connected(std::uint64_t id, detail::socket_type sock) {
  auto it = dials.find(id);
  if (it == dials.end() || stopping) return;
  auto c = std::make_shared<detail::connection>(std::move(sock), params, true, it->second.address);
  c->dial_id = id;
  add(c);
}

void endpoint::impl::dial_failed(std::uint64_t id, const error& e) {
  auto it = dials.find(id);
  if (it == dials.end()) return;
  auto& d = it->second;
  if (d.waiter) {
    auto w = std::move(d.waiter);
    d.waiter = nullptr;
    if (!d.established) dials.erase(it);
    w(e);
    return;
  }
  if (!d.reconnect || stopping) return (void)dials.erase(it);
  if (++d.attempts >= cfg.reconnect_attempts) {
    spdlog::warn("transport: giving up re-dialling {} after {} attempts: {}", d.address, d.attempts,
                 e.to_string());
    dials.erase(it);
    return;
  }
  spdlog::debug("transport: re-dial {} failed: {}", d.address, e.to_string());
  schedule_redial(id);
}

void endpoint::impl::schedule_redial(std::uint64_t id) {
  auto& d = dials[id];
  thread_local std::mt19937_64 rng(std::random_device{}());
  auto base = cfg.reconnect_initial * (1LL << std::min(d.attempts, 20));
  base = std::min<std::chrono::milliseconds>(base, cfg.reconnect_max);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  auto wait = std::chrono::milliseconds(static_cast<std::int64_t>(base.count() * jitter(rng)) + 1);
  d.timer = std::make_unique<asio::steady_timer>(io, wait);
  d.timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (!ec) start_dial(id);
  });
}

}  // namespace troupe
