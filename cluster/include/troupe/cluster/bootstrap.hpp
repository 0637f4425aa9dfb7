// How the control plane starts nodes of the same binary: the `troupe node` command line, the
// launch spec around it, and the nodes.json snapshot `troupe status/stop/scale` and `troupe chaos`
// read back. The runner (control/) and the tests build both only here.
//
//   troupe node --job-dir jobs/fm-1 --role worker --index 3 --incarnation 2
//        --train <dir> --test <dir> --join 127.0.0.1:7000 [extra flags...]
//
// The master gets `--listen <address>` where the others get `--join <address>`: the address is
// fixed for the job, so a relaunched master is found again at the same place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/cluster/membership.hpp"

namespace troupe::cluster {

struct node_args {
  std::string master;  // the master's transport address host:port (it listens there, others join)
  node_role role = node_role::worker;
  std::size_t index = 0;  // ps-<index>, worker-<index>; 0 for the master
  std::uint64_t incarnation = 0;
  std::string job_dir;              // the job directory (job.toml, logs/, journal/, checkpoints/)
  std::string train_dir, test_dir;  // the prepared record stores
  std::vector<std::string> extra;   // further flags, appended as given
  // node_name(role, index) and the incarnation: "worker-3#2".
  node_id id() const;
};

// Errors (invalid_spec) name the flag: a bad master address (--listen for the master, --join for
// the others), a role `troupe node` does not run (dispenser: it lives in the master process), an
// empty --job-dir, --train or --test.
expected<void> validate_node_args(const node_args& a);

// {"troupe", "node", "--job-dir", ..., "--role", ..., "--index", ..., "--incarnation", ...,
//  "--train", ..., "--test", ..., "--listen" | "--join", <master>, extra...}
std::vector<std::string> node_argv(const node_args& a);

// Variables a node of `role` is started with besides TROUPE_NODE. The master's: GLIBC_TUNABLES
// with glibc.malloc.tcache_count=0 (after what `inherited`, this process's own GLIBC_TUNABLES,
// already sets): without glibc's per-thread caches of freed blocks the master's resident memory
// per joined worker after a join storm is ~150 B lower, 842-942 B against 960-1,083 at 1,000
// workers, for the same lease rate (docs/job.md "Memory"). Empty for the other roles.
std::vector<std::pair<std::string, std::string>> node_environment(node_role role, const char* inherited);

// A spec that runs node_argv(a) from this binary (program empty), logging to
// dir.log_path(<name>), in this process's working directory (relative paths in the job file mean
// the same to every node), with TROUPE_NODE=<name#incarnation> and node_environment(a.role) added
// to the environment.
node_spec node_launch_spec(const node_args& a, const job_dir& dir, resources need = {});

// What the control plane knows of one node it runs (one per name, its latest incarnation).
struct node_entry {
  node_id id;
  node_role role = node_role::worker;
  std::optional<node_handle> handle;  // set while the launcher runs it
  bool leaving = false;               // asked to stop (scale-down, shutdown): not relaunched
  std::string address;                // where it listens, when known (the master's fixed address)
  std::uint64_t start_time = 0;       // of the running process, taken at launch (0: read it now)
  std::string ended;                  // how its last process ended ("killed by SIGKILL"), once it has
  long slurm_job = 0;                 // the Slurm job running it (handle->pid is 0 then)
};

// The nodes.json content: one record per entry, with the pid of its running handle and that
// process's start time (so `troupe stop` can check the pid still names it), state "running",
// "leaving" or "exited" (no handle: pid 0, and `exit` says how it ended). `control_address` is where `troupe
// status/scale/stop` reach the job (the runner), recorded as runner_address.
nodes_file make_nodes_file(const std::string& job_id, std::uint64_t epoch, const std::string& control_address,
                           const std::vector<node_entry>& nodes, std::int64_t now_ms);

}  // namespace troupe::cluster
