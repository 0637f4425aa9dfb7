#include "node_ring_listener.hpp"

namespace troupe::actors {

expected<collective::tcp_listener*> node_ring_listener::open(const std::string& node_address) {
  std::lock_guard lk(mu_);
  if (listener_) return listener_.get();
  auto host = node_address.substr(0, node_address.rfind(':'));
  auto l = collective::tcp_listener::open(host);
  if (!l) return l.err();
  listener_ = std::move(*l);
  address_ = host;
  address_.append(":").append(std::to_string(listener_->port()));
  return listener_.get();
}

std::string node_ring_listener::address() const {
  std::lock_guard lk(mu_);
  return address_;
}

}  // namespace troupe::actors
