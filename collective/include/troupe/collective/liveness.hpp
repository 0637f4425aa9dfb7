// Liveness: whether a node of this job has exited, known on its host sooner than its connection,
// its heartbeats or its parent can tell (a killed process takes milliseconds to tear down before
// any of those report it). The master checks a worker's word that a neighbour died against it;
// ring links watch their neighbours with it while they wait.
//
// One object per job per process. Backends: shm/liveness.hpp (beacons in shared memory, same
// host). A node on another host, one that has not started its beacon, or one whose leftover was
// removed is unknown: gone() is false and watch() null, and callers fall back to slower evidence.
//
// Threads: start, gone, remove and remove_all may be called from any thread; a watch is used by
// one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::collective {

class liveness {
 public:
  // A sign of life that this process holds: watchers see the process gone once it is destroyed
  // (a clean exit, which also removes it) or once the process dies.
  class beacon {
   public:
    virtual ~beacon() = default;
  };
  // A repeated, cheap check on one node, for a wait loop. Once gone() is true it stays true.
  class watch {
   public:
    virtual ~watch() = default;
    virtual bool gone() = 0;
  };

  virtual ~liveness() = default;
  // Starts this process's beacon as node `self`; a leftover of an earlier process under the same
  // id is replaced.
  virtual expected<std::unique_ptr<beacon>> start(const node_id& self) = 0;
  // Whether `node` is known to have exited (killed or clean). False when nothing is known.
  virtual bool gone(const node_id& node) = 0;
  // A watch on `node`; null when nothing can be watched (unknown, as above).
  virtual std::unique_ptr<watch> watch_node(const node_id& node) = 0;
  // Removes what a gone node left behind (a killed process cannot remove its own beacon). Harmless
  // when there is nothing; call only once the node is known gone.
  virtual void remove(const node_id& node) = 0;
  // Removes what every node of the job left behind; call once all of them are gone.
  virtual void remove_all() = 0;
};

// The liveness of `job` on this host (shared-memory beacons).
std::unique_ptr<liveness> make_host_liveness(const std::string& job);

}  // namespace troupe::collective
