// Host cleanup after a job: what its killed nodes left behind for the collectives (rings, liveness
// beacons, of every link backend that leaves anything on the host).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// What a job whose runner and nodes were all killed left in /dev/shm once nothing will clean it:
// its directory removed by hand (`troupe stop` and a `--resume` remove a job's own; `troupe jobs
// prune` only removes jobs that ended, which left none).
struct shm_orphans {
  std::vector<std::string> instances;  // "<job id>@<instance>" of each job instance swept
  std::size_t names = 0;
  std::uintmax_t bytes = 0;
};
// Removes (with dry_run, only counts) this user's "troupe-<job id>@<instance>-..." names of the job
// instances of which no process on this host has a name open or mapped (/proc/*/fd, /proc/*/maps)
// and whose every name is older than `min_age`: a running job's live nodes hold their beacons mapped,
// and a name just made is open by its maker. Instances are swept whole, never a name of one that
// runs. Names without an instance (tests' and benchmarks' own) are never swept. With `min_bytes`,
// only instances of that many bytes at least, unless /dev/shm is more than 3/4 full (and /proc is
// not walked when there is none): a run's start sweeps so, when it matters.
shm_orphans sweep_orphaned_shm(std::chrono::seconds min_age, bool dry_run, std::uintmax_t min_bytes = 0);

}  // namespace troupe::collective
