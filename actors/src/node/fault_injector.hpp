// The node's side of `troupe chaos` fault injection: a JobMessage.inject sets the transport's drop
// probability and delay (endpoint::set_fault_injection, clamped: at most 10 s of delay, an hour of
// duration) and clears them once the inject's duration is over; a newer inject replaces the older
// one and its reset (the older reset is ended first, so it cannot clear the newer fault).
//
// Contract: handle() may be called on the endpoint's io thread and never blocks it (the reset waits
// on a thread of its own). A malformed message is logged and ignored. The destructor ends the
// pending reset early (it clears the fault) and joins it: destroy the injector before the endpoint.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/message.hpp"

namespace troupe::actors {

class fault_injector {
 public:
  // Where a fault goes: the endpoint's set_fault_injection (a test passes its own).
  using apply_fn = std::function<void(const fault_injection&)>;
  explicit fault_injector(endpoint& net)
      : apply_([&net](const fault_injection& f) { net.set_fault_injection(f); }) {}
  explicit fault_injector(apply_fn apply) : apply_(std::move(apply)) {}
  ~fault_injector();
  fault_injector(const fault_injector&) = delete;
  fault_injector& operator=(const fault_injector&) = delete;

  // A JobMessage.inject (from `troupe chaos`).
  void handle(const message& m);
  // Applies `f` now and clears it after `duration`, replacing any earlier inject and its reset.
  void inject(const fault_injection& f, std::chrono::milliseconds duration);

 private:
  apply_fn apply_;
  std::mutex mu_;
  std::jthread reset_;  // under mu_
};

}  // namespace troupe::actors
