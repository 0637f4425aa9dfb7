// Host cleanup after a job: what its killed nodes left behind for the collectives (rings, liveness
// beacons, of every link backend that leaves anything on the host).
#pragma once

#include <string>

namespace troupe::collective {

// Removes the leftovers of `job` on this host; never another job's. Call once every node of the
// job is gone (a live node's ring or beacon would be pulled from under it).
void remove_job_leftovers(const std::string& job);

}  // namespace troupe::collective
