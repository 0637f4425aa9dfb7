#include "troupe/cluster/run_tool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "troupe/cluster/errc.hpp"

extern char** environ;

namespace troupe::cluster {

namespace {

// The longest real poll between two looks at the clock.
constexpr std::int64_t nap_ms = 50;

// Reads both pipes until EOF or the deadline on `clk`; false on timeout or past `max_output` bytes
// (0: no limit).
bool drain(int out_fd, int err_fd, tool_result& r, troupe::clock& clk, troupe::clock::time_point deadline,
           std::size_t max_output) {
  pollfd p[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  char buf[4096];
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk.now()).count();
    if (left <= 0) return false;
    if (::poll(p, 2, static_cast<int>(std::min(left, nap_ms))) < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
        if (max_output > 0 && r.out.size() + r.err.size() > max_output) return false;
      } else if (n == 0 || errno != EINTR) {
        p[i].fd = -1;
      }
    }
  }
  return true;
}

// Starts `prog` (looked up on PATH when `search_path`) with stdin from /dev/null and its stdout and
// stderr into two new pipes, whose read ends it puts in `out_fd` and `err_fd`.
expected<pid_t> spawn_tool(const std::string& prog, bool search_path, const std::vector<std::string>& argv,
                           int& out_fd, int& err_fd) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return make_unexpected(cluster_errc::launch_failed, "pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return make_unexpected(cluster_errc::launch_failed, "pipe: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A tool starts with SIGPIPE as it is by default, whatever this process does with it (a runner
  // ignores it: an ignored signal would stay ignored across the exec).
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t dfl;
  ::sigemptyset(&dfl);
  ::sigaddset(&dfl, SIGPIPE);
  posix_spawnattr_setsigdefault(&at, &dfl);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = search_path ? ::posix_spawnp(&pid, prog.c_str(), &fa, &at, args.data(), environ)
                       : ::posix_spawn(&pid, prog.c_str(), &fa, &at, args.data(), environ);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]), ::close(err[0]);
    return make_unexpected(cluster_errc::launch_failed, prog + ": " + std::strerror(rc));
  }
  out_fd = out[0];
  err_fd = err[0];
  return pid;
}

}  // namespace

expected<tool_result> run_tool(const std::vector<std::string>& argv, const std::string& bin_dir,
                               std::chrono::milliseconds timeout, std::size_t max_output,
                               troupe::clock& clk) {
  std::string prog = bin_dir.empty() ? argv.at(0) : bin_dir + "/" + argv.at(0);
  int out = -1, err = -1;
  auto spawned = spawn_tool(prog, bin_dir.empty(), argv, out, err);
  if (!spawned) return spawned.err();
  const pid_t pid = *spawned;
  tool_result r;
  bool finished = drain(out, err, r, clk, clk.now() + timeout, max_output);
  ::close(out), ::close(err);
  if (!finished) ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!finished && max_output > 0 && r.out.size() + r.err.size() > max_output)
    return make_unexpected(cluster_errc::launch_failed,
                           prog + " printed more than " + std::to_string(max_output) + " bytes");
  if (!finished)
    return make_unexpected(cluster_errc::launch_failed,
                           prog + " did not answer within " + std::to_string(timeout.count()) + " ms");
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  // posix_spawn reports a missing program as exit code 127 from the child.
  if (r.code == 127 && r.out.empty())
    return make_unexpected(cluster_errc::launch_failed, prog + ": not found (not on PATH)");
  return r;
}

}  // namespace troupe::cluster
