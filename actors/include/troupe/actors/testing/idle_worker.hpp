// For benchmarks and tests: a worker's training loop (train_some) outside its actor, with no task
// and its lease request on its way to node "master"'s dispenser over `net`, driven in the slices
// the worker actor's ticks give it. worker_idle_bench measures what the loop costs while it waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe::actors::testing {

class idle_worker {
 public:
  // Worker `self` on `net` (connected to "master"), on the system clock; its rpc client is
  // registered on `net` as "rpc". `net` outlives it.
  static expected<std::unique_ptr<idle_worker>> create(endpoint& net, const node_id& self);
  ~idle_worker();
  idle_worker(const idle_worker&) = delete;
  idle_worker& operator=(const idle_worker&) = delete;

  // A fresh loop (no task, no lease yet) run for `window` as the worker actor runs it: ticks of
  // train_some, each at most the actor's tick budget. Returns the loop's passes.
  std::uint64_t run(std::chrono::milliseconds window);
  troupe::clock& clock();

 private:
  struct impl;
  explicit idle_worker(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::actors::testing
