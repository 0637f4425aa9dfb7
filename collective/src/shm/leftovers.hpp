// What killed nodes of a job leave in /dev/shm: rings ("troupe-<job>-e<epoch>-r<rank>", spares
// "troupe-<job>-e0-r0-spare-<pid>") and liveness beacons ("troupe-<job>-live-<node>"). A clean exit
// leaves neither (a ring's name is unlinked once both ends attached it, a beacon removes itself).
#pragma once

#include <cstddef>
#include <string>

namespace troupe::collective {

enum class shm_leftovers { rings = 1, beacons = 2, all = 3 };

// Removes the job's names of those kinds; never another job's (whose id may share a prefix). Returns
// how many it removed.
std::size_t remove_shm_leftovers(const std::string& job, shm_leftovers which);

}  // namespace troupe::collective
