// The job directory: everything a running job keeps on disk, found again by `troupe status`,
// `troupe stop` and `troupe scale`, and by a restarted master.
//
//   <root>/<job id>/
//     job.toml        the job's configuration as the master resolved it (overrides applied)
//     nodes.json      pids and addresses of the running nodes (rewritten atomically)
//     instance        the random id of the runner now running the job (host names: /dev/shm)
//     runner.lock     held (flock) by the runner while it runs: a second runner is refused
//     runner.beat     the runner's heartbeat ("<pid> <count>", rewritten every second): nodes that
//                     stop hearing it end themselves ([cluster] runner_timeout_s)
//     result.json     the final metrics and how the job ended (finished, failed, stopped, ...)
//     logs/<node>.log stdout+stderr of each node, appended across incarnations
//     logs/runner.log the runner's own log: launches, deaths, relaunches, fences, scaling, stop
//     journal/        the task journal (LMDB, storage module)
//     checkpoints/    PS checkpoints (LMDB, storage module)
//
// Files are replaced atomically (write a temporary file, fsync, rename, fsync the directory), so a
// reader sees the old or the new content, never a torn one. Format: docs/cluster.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/cluster/membership.hpp"
#include "troupe/core/error.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::cluster {

struct node_record {
  node_id id;
  node_role role = node_role::worker;
  int pid = 0;
  std::uint64_t start_time = 0;  // /proc/<pid>/stat start time, to detect pid reuse (0: unknown)
  std::string address;           // host:port, empty while launching
  std::string state;             // member_state text, or "exited"
  std::string exit;              // once exited: how ("exited with code 0", "killed by SIGKILL")
  long slurm_job = 0;            // the Slurm job running it (launcher "slurm"; pid is 0 then)
  std::string host;              // the [cluster] hosts entry it runs on (local launcher); "": this machine
  bool operator==(const node_record&) const = default;
};

// Whether the node a record describes still runs on this machine: its pid alive with the recorded
// start time (gone: exited, no pid, or the pid is another process now). A record without a start
// time is `unknown`: the pid may be another process by now, so each caller decides for its action
// (resume's kill of a dead runner's orphans leaves it alone; stop's cleanup of the job's shared
// memory assumes it runs and keeps what it may use).
enum class node_liveness { gone, runs, unknown };
node_liveness liveness_of(const node_record& n);

// The content of nodes.json.
struct nodes_file {
  std::string job_id;
  std::uint64_t epoch = 0;      // membership epoch these records describe
  std::int64_t updated_ms = 0;  // wall-clock time of the write
  std::string runner_address;   // the runner's: where `troupe status/scale/stop` connect
  std::string metrics_address;  // the master's Prometheus /metrics ("host:port"; empty: none)
  std::uint32_t workers = 0;    // the runner's worker target (job.workers, or `troupe scale`'s); 0: unknown
  std::vector<node_record> nodes;
  bool operator==(const nodes_file&) const = default;
};

// JSON text of a nodes_file, and back. Parse errors (corrupt_file) name `source` and the field.
std::string to_json(const nodes_file& f);
expected<nodes_file> parse_nodes_json(std::string_view text, std::string_view source);

// <job dir>/stop.request: `troupe stop` of a job whose runner has not started its nodes yet (no
// nodes.json, no address to reach it at); the runner looks for it while it prepares.
inline std::string stop_request_path(std::string_view job_dir) {
  return std::string(job_dir) + "/stop.request";
}

// <job dir>/runner.beat (see above), for the runner and for its nodes.
inline std::string runner_beat_path(std::string_view job_dir) {
  return std::string(job_dir) + "/runner.beat";
}

// Replaces `path` with `content` atomically, the file `mode` (less the umask) from its creation:
// 0600 keeps a secret from every other user at every moment. The temporary beside it has a random
// name, is created exclusively and never through a link, so a directory another user controls
// cannot turn the write into one of any other file. Errors (io_error) name the file and the step.
expected<void> write_file_atomic(const std::string& path, std::string_view content, unsigned mode = 0644);

// A job id usable as a directory name: 1-64 characters of a-z, A-Z, 0-9, '_', '-', '.', not
// starting with '.'.
bool valid_job_id(std::string_view id) noexcept;

class job_dir {
 public:
  // Creates <root>/<job id>/ (and root) with its subdirectories and job.toml. Errors:
  // invalid_spec (bad job id), already_exists (the directory holds a job.toml), io_error.
  static expected<job_dir> create(const std::string& root, const std::string& job_id,
                                  std::string_view job_toml);
  // Opens an existing job directory. Errors: missing_file naming the directory or the first
  // missing part (job.toml, logs/, journal/, checkpoints/).
  static expected<job_dir> open(const std::string& path);
  // The job ids under `root` (directories holding a job.toml), most recently modified first.
  // A missing root is an empty list.
  static expected<std::vector<std::string>> list(const std::string& root);

  const std::string& path() const noexcept { return path_; }
  const std::string& job_id() const noexcept { return job_id_; }
  std::string logs_dir() const { return path_ + "/logs"; }
  std::string journal_dir() const { return path_ + "/journal"; }
  std::string checkpoints_dir() const { return path_ + "/checkpoints"; }
  std::string job_toml_path() const { return path_ + "/job.toml"; }
  std::string nodes_path() const { return path_ + "/nodes.json"; }
  std::string instance_path() const { return path_ + "/instance"; }
  std::string lock_path() const { return path_ + "/runner.lock"; }
  std::string result_path() const { return path_ + "/result.json"; }
  std::string log_path(std::string_view node_name) const {
    return logs_dir() + "/" + std::string(node_name) + ".log";
  }

  expected<std::string> read_job_toml() const;
  // Atomic replace of nodes.json.
  expected<void> write_nodes(const nodes_file& f) const;
  // Errors: missing_file (no nodes.json: the job never started or was cleaned up), corrupt_file.
  expected<nodes_file> read_nodes() const;
  // Takes runner.lock (a POSIX write lock, not inherited by children, released by the kernel when
  // the process dies by any means) and returns its descriptor, to keep open for the runner's life.
  // A lock held for a moment (remove() deciding) is waited for, 250 ms at most. Errors:
  // already_exists naming the live runner's pid; missing_file when the directory was removed (or
  // set aside by remove()) as the lock was taken; io_error.
  expected<int> lock_runner() const;
  // Removes the job's directory unless a runner holds runner.lock: takes the lock (not waiting),
  // asks `still_to_go` again under it (a runner may have come and gone since the caller looked),
  // renames the directory to a hidden name beside it (.removing-<id>-<pid>: never listed, never a
  // job id), lets the lock go and removes that. A runner that opened the lock file before the rename
  // finds it gone once it holds the lock and stops (lock_runner: missing_file), so no runner starts
  // in a directory being removed. Returns false (nothing removed) when a runner holds the lock or
  // `still_to_go` says no. Errors: io_error (the hidden directory's name in it when the rename was
  // done but the removal failed).
  template <class Pred>
  expected<bool> remove_unless_running(Pred&& still_to_go) const {
    auto fd = try_lock();
    if (!fd) return fd.err();
    if (*fd < 0) return false;
    return set_aside_and_remove(*fd, static_cast<bool>(still_to_go()));
  }
  // The hidden names remove_unless_running() renames directories to (".removing-"), and whether the
  // process that renamed `name` is gone (its pid, after the last '-', not alive): what it left.
  static constexpr std::string_view removing_prefix = ".removing-";
  static bool left_by_dead_remover(std::string_view name);
  // The pid of the live process holding runner.lock, nullopt when none does (the job ended or its
  // runner died). Takes nothing: safe while a runner starts.
  std::optional<int> runner_pid() const;
  // The instance id of the runner that last ran the job; empty when it never wrote one.
  std::string read_instance() const;
  expected<void> write_instance(std::string_view instance) const;

 private:
  // runner.lock taken without waiting: its descriptor, -1 when another process holds it.
  expected<int> try_lock() const;
  expected<bool> set_aside_and_remove(int lock_fd, bool go) const;
  unexpected removed_as_started() const;
  job_dir(std::string path, std::string job_id) : path_(std::move(path)), job_id_(std::move(job_id)) {}
  std::string path_;
  std::string job_id_;
};

}  // namespace troupe::cluster
