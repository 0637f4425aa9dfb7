// `troupe serve`: a model written by a job served over HTTP through the Open Inference Protocol
// (KServe v2), by model replicas that are processes of their own (docs/serving.md).
//
//   front end (`troupe serve`)                      replicas (`troupe serve-replica`)
//   HTTP (observe::http_server) -> parse -> queue   each: the TorchScript predictor (plugin),
//   -> batches -> transport (Cap'n Proto frames) -> libtorch's threads, one batch at a time
//   <- results <- answers to each request         <-
//
// The front end never loads libtorch. It launches the replicas through cluster::make_launcher
// ([cluster]: this machine, other hosts, Slurm), relaunches those that die, sends the batches a
// dead or hung replica held to another, and swaps models (reload, SIGHUP, --watch) by launching a
// new generation of replicas, moving traffic once all are warm, and draining the old ones.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/serve/config.hpp"

namespace troupe {
class clock;
}

namespace troupe::serve {

// Runs the front end until SIGINT or SIGTERM (SIGHUP: reload). Returns the exit code: 0 after a
// stop, 1 when the first model could not be served (the error printed), 2 for bad settings.
int run_frontend(const serve_settings& settings);

struct replica_options {
  std::string connect;  // the front end's transport address
  std::string name;     // node name, "replica-<generation>-<slot>"
  std::uint64_t incarnation = 0;
  std::uint32_t generation = 0;
  std::string model_dir;
  std::string version;  // what its answers say (the front end names versions: model_info::version of the
                        // directory it was asked to serve, not of its snapshot)
  int threads = 1;
  std::string device = "cpu";
  std::size_t max_batch = 64;
  int warmup = 20;
  std::vector<int> cpus;  // pin to these CPUs (empty: no pinning)
  std::string token_file;
  // The front end's [transport] heartbeats, so that both ends judge silence alike.
  std::chrono::milliseconds heartbeat_interval{500}, heartbeat_timeout{5000};
};
// Runs one replica until the front end goes away or SIGTERM/SIGINT. Returns the exit code.
int run_replica(const replica_options& options);

// `troupe serve --watch DIR` without a model: the newest model directory under DIR (DIR, DIR/<x> or
// DIR/<x>/model holding model.json) that --watch would take: this user's own files, no link.
// Errors name DIR: unreadable (io_error), none there yet (invalid_argument).
expected<std::string> newest_watched_model(const std::string& watch);

// Where this user's servers keep their state under `root`: <root>/serve, or <root>/serve-<uid> where
// another user made <root>/serve (cluster::own_subdir).
std::string servers_dir(const std::string& root);
// Where a running server keeps its state: <servers_dir>/<name>/ (server.json, token, logs/,
// models/).
std::string state_dir(const std::string& root, const std::string& name);

// A server under a root as its files say (`troupe serve status`): `running` while a process holds
// its server.lock; `server_json` its server.json as written last ("" when there is none: a first
// model still loading, or a start that failed).
struct server_entry {
  std::string name;
  std::string state_dir;
  bool running = false;
  std::string server_json;
};
// This user's servers under `root` (servers_dir), by name.
std::vector<server_entry> list_servers(const std::string& root);
// Whether a server holds the lock of `state_dir` now (its exclusive flock; looked at with a shared
// one for a moment, so that lookers never read as a server to each other).
bool server_running(const std::string& state_dir);
// The server's own exclusive lock on the open server.lock `fd`. A looker's moment (server_running, by
// serve status, jobs prune, the dashboard) is not a server: tried again for 200 ms before the name is
// said taken (false).
bool take_server_lock(int fd, troupe::clock& clk);

// `troupe serve stop`: SIGTERM to the server `name` under `root` (the process holding its
// server.lock, from /proc/locks: a starting server too; the same stop as a SIGTERM by hand,
// drain_ms included), then waits up to `timeout` for it to end. Returns its pid. Errors (io_error):
// no such server running, or it still runs after `timeout` (naming a drain under way).
expected<int> stop_server(const std::string& root, const std::string& name,
                          std::chrono::milliseconds timeout);

struct reload_result {
  std::string version;
  std::uint32_t generation = 0;
};
// `troupe serve reload`: asks the server `name` under `root` to swap to `model_dir` ("" : the
// directory it serves, read again) and waits for the answer (up to `timeout`). Errors: the server
// is not running or does not answer (io_error), the model was refused (invalid_argument, why).
expected<reload_result> request_reload(const std::string& root, const std::string& name,
                                       const std::string& model_dir, std::chrono::milliseconds timeout);

}  // namespace troupe::serve
