// How the master starts nodes of the same binary: the `troupe node` command line, the launch spec
// around it, and the nodes.json snapshot `troupe status/stop/scale` read back.
//
//   troupe node --join 127.0.0.1:7000 --role worker --name worker-3 --incarnation 2
//        --job-dir /var/troupe/jobs/0123456789abcdef [extra flags...]
//
// The `troupe node` subcommand (apps/) parses these flags and calls validate_node_args().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/cluster/membership.hpp"

namespace troupe::cluster {

struct node_args {
  std::string join;  // the master's transport address, host:port
  node_role role = node_role::worker;
  node_id id;                      // name and incarnation of the node to start
  std::string job_dir;             // the job directory (job.toml, logs/, journal/, checkpoints/)
  std::vector<std::string> extra;  // further flags, appended as given (e.g. "--set", "log.level=debug")
};

// Errors (invalid_spec) name the flag: a bad --join address, a bad --name, a name that does not
// fit the role (a worker must be worker-<n>, a ps ps-<n>; master and dispenser their role name),
// an empty --job-dir.
expected<void> validate_node_args(const node_args& a);

// {"troupe", "node", "--join", ..., "--role", ..., "--name", ..., "--incarnation", ..., "--job-dir", ...,
// extra...}
std::vector<std::string> node_argv(const node_args& a);

// A spec that runs node_argv(a) from this binary (program empty), logging to
// dir.log_path(a.id.name), in the job directory, with TROUPE_NODE=<name#incarnation> added to the
// environment.
node_spec node_launch_spec(const node_args& a, const job_dir& dir, resources need = {});

// The nodes.json content for a view: every member with the pid and start time of its running
// launcher handle (matched by node id); the master member gets this process's pid; members the
// launcher did not start (joined from elsewhere) get pid 0.
nodes_file make_nodes_file(const std::string& job_id, const membership_view& view,
                           const std::vector<node_handle>& running, std::int64_t now_ms);

}  // namespace troupe::cluster
