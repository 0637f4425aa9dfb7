// Host cleanup after a job: what its killed nodes left behind for the collectives (rings, liveness
// beacons, of every link backend that leaves anything on the host).
#pragma once

#include <cstddef>
#include <string>

namespace troupe::collective {

// The key every host name of one job instance is built from (shared-memory rings and liveness
// beacons: "troupe-<key>-..."): "<job id>@<instance>", or the job id alone without an instance.
// Two runs of jobs with one id (two directories, or a resumed job and the leftovers of its dead
// runner) get distinct instances, so their names never collide; '@' never occurs in a job id, so
// no job's key is a prefix of another's.
std::string instance_key(const std::string& job_id, const std::string& instance);

// Removes the leftovers of `job` (an instance_key) on this host; never another job's. Call once every node of
// the job is gone (a live node's ring or beacon would be pulled from under it). Returns how many
// names it removed.
std::size_t remove_job_leftovers(const std::string& job);

// Removes what the node `node` (node_id::to_string) of `job` left on this host: its liveness beacon.
// Call once it is gone (reaped). A node killed by its runner while the master still saw it alive
// (a stopped one, fenced) had its beacon kept for the job's life: one /dev/shm file per fence.
void remove_node_leftovers(const std::string& job, const std::string& node);

}  // namespace troupe::collective
