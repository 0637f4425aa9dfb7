// `troupe node`: one process of a job (started by the runner's launcher). Builds the node runtime,
// starts the role's actors under the node's root supervisor, joins the master, and runs until
// SIGTERM/SIGINT (ordered shutdown) or until the root supervisor gives up (exit code 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::actors {

struct node_options {
  std::string job_dir;
  std::string role;       // master | ps | worker
  std::size_t index = 0;  // ps-<index>, worker-<index>
  // A worker's place among the job's running workers (its GPU is slot % devices); -1: its index.
  // Indices are never reused, so after scaling they no longer spread workers over the devices.
  long slot = -1;
  std::uint64_t incarnation = 0;
  std::string listen = "127.0.0.1:0";
  std::string join;  // the master's address (not for the master itself)
  // This host's address to listen on and to give the others (a node started by hand on another
  // host): listens on <advertise>:<the port of listen>. Empty: listen as given.
  std::string advertise;
  double connect_timeout_s = 30;  // how long --join keeps dialling an unreachable master
  // Started by hand (not by the runner, which sets TROUPE_NODE): no SIGTERM comes at the end of the
  // job, so the node stops once the job's result.json is written.
  bool by_hand = false;
  std::string train_dir, test_dir;
  // --standby: preload, then wait for the identity (become_node); the other flags only say which
  // job and data to preload for.
  bool standby = false;
  // Set for a node that a standby became: logged as the node's first line.
  std::string standby_note;
};

// Returns the process exit code.
int run_node(const node_options& o);

// `troupe node --standby` (troupe/cluster/standby.hpp): loads what any worker of the job at
// o.job_dir loads whatever its identity (preload_host_backend), then blocks until the launcher
// sends an identity on stdin and applies it: stdout and stderr appended to its log file, stdin on
// /dev/null, its environment set. Returns the node's command line (argv[0] included), to be run as
// `troupe node` runs it, and in `note` what the standby had loaded. Errors: the identity could not
// be read or is malformed (the launcher went away: the process should just exit).
expected<std::vector<std::string>> become_node(const node_options& o, std::string& note);

}  // namespace troupe::actors
