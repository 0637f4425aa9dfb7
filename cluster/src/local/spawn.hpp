// fork + exec of one node process for the local launcher. Everything the child needs is built
// before fork(), so the child runs only async-signal-safe calls between fork and exec (the parent
// is multi-threaded).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "troupe/cluster/launcher.hpp"

namespace troupe::cluster::local {

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept;
  ~unique_fd();
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct prepared_spawn {
  std::string path;  // resolved program
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;  // null-terminated, pointing into the stores
  std::string working_dir;
  unique_fd log_fd;    // -1: inherit stdout/stderr
  unique_fd stdin_fd;  // /dev/null, or a standby's identity socket (replace it before spawning)
};

// Resolves the program (empty: self_exe(); no '/': searched in PATH), builds argv and the
// environment, opens the log file and writes its header. Errors name the node and the cause.
expected<prepared_spawn> prepare_spawn(const node_spec& spec);

struct spawned {
  int pid = 0;
  unique_fd pidfd;  // -1 where pidfd_open is unavailable (then the reaper polls)
};

// Forks and execs; returns once the exec succeeded, or an error with the failing step and errno
// (the failed child is reaped before returning).
expected<spawned> spawn_process(prepared_spawn& p, const node_spec& spec);

// The header line prepare_spawn writes to the node's log: "==== troupe launcher <time>: start
// <name#incarnation>: <path> <argv[1]> ...".
std::string header_line(const node_spec& spec, const std::string& path);

// Appends one line to a node's log file (no-op for an empty path); best effort, never throws.
void append_log_line(const std::string& path, const std::string& line) noexcept;

// "2026-11-22T02:40:00Z"
std::string utc_now();

}  // namespace troupe::cluster::local
