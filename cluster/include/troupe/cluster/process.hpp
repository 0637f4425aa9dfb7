// Small facts about local processes, used by the local launcher and by `troupe status/stop` to
// check a pid written in nodes.json still names the same process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "troupe/core/error.hpp"

namespace troupe::cluster {

// The path of this process's executable (/proc/self/exe's target). Where the file was replaced
// since the process started (an upgrade or a rebuild renamed a new binary over it: the target reads
// "<path> (deleted)"), the path without that suffix: the binary there now, for another machine (a
// host command, Slurm) and for files beside it. Errors name /proc/self/exe.
expected<std::string> self_exe();
// What to exec to run this program again on this machine: self_exe(), or "/proc/self/exe" (the
// running image itself) where the file was replaced: exec of "<path> (deleted)" failed, and every
// relaunch and scale-up of a running job with it.
expected<std::string> self_exe_to_run();

// State letter and start time (clock ticks since boot) from /proc/<pid>/stat; nullopt when the
// process does not exist or the file cannot be parsed.
struct process_stat {
  char state = '?';  // R, S, D, Z (zombie), T, t, X, ...
  std::uint64_t start_time = 0;
  int pgid = 0;
  int ppid = 0;
};
std::optional<process_stat> read_process_stat(int pid);

// True when `pid` exists and is not a zombie or dead (state Z or X). When start_time is given,
// also requires the process to have started at that time (guards against pid reuse).
bool process_alive(int pid, std::optional<std::uint64_t> start_time = std::nullopt);

// "SIGKILL" for 9, "signal 77" for an unknown number.
std::string signal_name(int sig);

}  // namespace troupe::cluster
