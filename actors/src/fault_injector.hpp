// The node's side of `troupe chaos` fault injection: a JobMessage.inject sets the transport's drop
// probability and delay (endpoint::set_fault_injection, clamped: at most 10 s of delay, an hour of
// duration) and clears them once the inject's duration is over; a newer inject replaces the older
// one and its reset.
//
// Contract: handle() may be called on the endpoint's io thread and never blocks it (the reset waits
// on a thread of its own). A malformed message is logged and ignored. The destructor ends the
// pending reset early (it clears the fault) and joins it: destroy the injector before the endpoint.
#pragma once

#include <mutex>
#include <thread>

#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::actors {

class fault_injector {
 public:
  explicit fault_injector(endpoint& net) : net_(net) {}
  ~fault_injector();
  fault_injector(const fault_injector&) = delete;
  fault_injector& operator=(const fault_injector&) = delete;

  // A JobMessage.inject (from `troupe chaos`).
  void handle(const message& m);

 private:
  endpoint& net_;
  std::mutex mu_;
  std::jthread reset_;  // under mu_
};

}  // namespace troupe::actors
