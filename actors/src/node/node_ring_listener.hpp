// A worker's ring listener: the TCP listener its ring neighbours on other hosts dial
// (collective/tcp), on the host of the node's advertised address, any port. Opened once for the
// life of the process, so a restarted worker actor keeps the address its joins advertised.
//
// Contract: any thread (one mutex). open() fails with the listener's error (and may be tried
// again); address() is empty until it succeeded. The listener lives as long as this object.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "troupe/collective/tcp/link.hpp"
#include "troupe/core/error.hpp"

namespace troupe::actors {

class node_ring_listener {
 public:
  // The listener, opened on the host of `node_address` ("host:port") at the first call.
  expected<collective::tcp_listener*> open(const std::string& node_address);
  // "host:port" of the listener; empty until open() succeeded.
  std::string address() const;

 private:
  mutable std::mutex mu_;
  std::unique_ptr<collective::tcp_listener> listener_;
  std::string address_;
};

}  // namespace troupe::actors
