// What a ring session needs from the node it runs in: who it is, the ring of the current
// membership view (with each member's host and ring address), its ring listener, the ring epoch to poll, the
// master's ear and the job's liveness. The worker's node runtime implements it (actors/); tests fake it. The
// collective module knows nothing else of the node: no actors, no membership views, no transport endpoint.
//
// Threads: members() and ring_epoch() may be called from any thread while the node changes the
// view; the rest from the session's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/collective/liveness.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::collective {

class tcp_listener;

struct ring_member {
  node_id id;
  int pid = 0;  // its process on this host, watched while waiting on it (0: unknown, not watched)
  // Where it runs: members with equal host keys share /dev/shm and are linked over shared memory,
  // others over TCP. Empty keys are equal (every member on one host, as in a local job).
  std::string host;
  // "host:port" of its ring listener, which its previous rank on another host dials; empty: it
  // takes no TCP link.
  std::string ring_address;
};

// The ring of one epoch: the alive workers in rank order. Every member computes the same ring.
struct ring_members {
  std::uint64_t epoch = 0;  // 0: no view yet
  std::vector<ring_member> ranks;
};

class ring_context {
 public:
  virtual ~ring_context() = default;
  // The job id: rings of different jobs on one host never mix.
  virtual const std::string& job() const = 0;
  virtual const node_id& self() const = 0;
  // The ring of the latest view and its epoch, read together.
  virtual ring_members members() const = 0;
  // The epoch of the latest ring, readable without a lock: collectives poll it (a few times per
  // stalled step) and fail fast with `cancelled` once it moves past theirs.
  virtual const std::atomic<std::uint64_t>& ring_epoch() const = 0;
  // Tells the master that `node` is gone (`why`: the evidence, for its log). Must not block long;
  // the master checks the evidence itself (liveness) before it acts.
  virtual void report_gone(const node_id& node, const std::string& why) = 0;
  // The job's liveness on this host.
  virtual liveness& live() = 0;
  // This worker's ring listener (its ring_member::ring_address), on which its previous rank on
  // another host connects; null when it has none (then no TCP link can reach it).
  virtual tcp_listener* ring_listener() { return nullptr; }
  // The job's token: the ends of a TCP link prove they hold it (a process outside the job cannot
  // take a rank's place in the ring). Never logged.
  virtual const std::string& ring_secret() const = 0;
};

}  // namespace troupe::collective
