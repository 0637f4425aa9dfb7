// The ring of alive workers for the current membership epoch, as a training strategy sees it
// (troupe::actors::ring_session is this type). ensure() (re)builds it after a membership change; a
// collective interrupted by a change fails fast (collective_errc), after which the strategy calls
// ensure() again and resynchronises. mixed/session.hpp links each pair of neighbours over shared
// memory inside a host and over TCP across hosts.
//
// Threads: one thread (the worker's) calls a session; the node may change the ring epoch from any.
#pragma once

#include <cstdint>
#include <span>

#include "troupe/core/error.hpp"

namespace troupe::collective {

class ring_session {
 public:
  struct info {
    int rank = 0, size = 1;
    std::uint64_t epoch = 0;
    bool fresh = false;  // built by this call: replicas may differ, resynchronise them
    int hosts = 1;       // distinct hosts the ring's members run on (the goodput model's span)
  };
  virtual ~ring_session() = default;
  // Fails while this worker is not (yet) in the ring, or the ring could not be built in time.
  virtual expected<info> ensure() = 0;
  // Sum over the ring, in place.
  virtual expected<void> allreduce(std::span<float> data) = 0;
  // `root`'s `data` to every rank.
  virtual expected<void> broadcast(std::span<float> data, int root = 0) = 0;
  // Forget the current ring (after a failed collective).
  virtual void reset() = 0;
  // True after a collective failed because the only other rank's process is gone: until the next
  // membership view this worker is the whole ring, so a step it was taking can be finished alone
  // (its own gradients are the ring's average) instead of dropped.
  virtual bool alone() const { return false; }
};

}  // namespace troupe::collective
