// The membership the master keeps and publishes (master.cpp): the view and the epoch its worker
// ring last changed at, the changes waiting for the next broadcast, the members a broadcast missed,
// the members suspected while this master was paused, and the holders whose leases it had
// re-queued. Only the master actor touches it (no locks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "troupe/cluster/membership.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::actors {

class pause_watch;

struct master_members {
  cluster::membership_view view;
  std::uint64_t ring_epoch = 0;  // the epoch the allreduce ring last changed at
  std::string epoch_file;        // <job dir>/master_epoch: a restarted master continues the epochs
  // View changes since the last broadcast, and whether the broadcast is queued (master.cpp publish).
  std::vector<std::string> publish_reasons;
  bool publish_queued = false;
  // Members the last broadcast failed to reach. The others that had an address then hold its view
  // (`view`'s mark) and get the next one as a delta.
  std::set<std::string, std::less<>> unsent;
  // Members whose connection dropped while this master was itself paused (its own silence made
  // them drop it): kept in the view until they re-join, or declared dead when `until` passes.
  struct suspect {
    node_id id;
    std::string reason;
    troupe::clock::time_point until;
  };
  std::map<std::string, suspect> suspects;  // by node name
  std::shared_ptr<pause_watch> pause;       // this process's own pauses (pause_watch.hpp)
  // Holders whose leases the dispenser was told to re-queue (a departed member, or a worker that
  // exited before it joined): each id once.
  std::set<std::string> requeued_holders;
  // When the holders of leases were last reconciled with the members (master_status.cpp).
  troupe::clock::time_point last_reconcile;
  // When the heap's free pages go back to the system (master_status.cpp trim_heap): the first
  // broadcast since the last trim, and a second after the latest one.
  std::optional<std::pair<troupe::clock::time_point, troupe::clock::time_point>> trim_at;
};

}  // namespace troupe::actors
