#include "slurm/commands.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "troupe/cluster/errc.hpp"

extern char** environ;

namespace troupe::cluster::slurm {

namespace {

using steady = std::chrono::steady_clock;

// Reads both pipes until EOF or the deadline; false on timeout or past `max_output` bytes (0: no limit).
bool drain(int out_fd, int err_fd, tool_result& r, steady::time_point deadline, std::size_t max_output) {
  pollfd p[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  char buf[4096];
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) return false;
    if (::poll(p, 2, static_cast<int>(left)) < 0 && errno != EINTR) return false;
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

}  // namespace

expected<tool_result> run_tool(const std::vector<std::string>& argv, const std::string& bin_dir,
                               std::chrono::milliseconds timeout, std::size_t max_output) {
  std::string prog = bin_dir.empty() ? argv.at(0) : bin_dir + "/" + argv.at(0);
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
  pid_t pid = 0;
  int rc = bin_dir.empty() ? ::posix_spawnp(&pid, prog.c_str(), &fa, nullptr, args.data(), environ)
                           : ::posix_spawn(&pid, prog.c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]), ::close(err[0]);
    return make_unexpected(cluster_errc::launch_failed, prog + ": " + std::strerror(rc));
  }
  tool_result r;
  bool finished = drain(out[0], err[0], r, steady::now() + timeout, max_output);
  ::close(out[0]), ::close(err[0]);
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

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> sbatch_argv(const node_spec& spec, const std::string& program, const options& so) {
  std::vector<std::string> a = {"sbatch",
                                "--parsable",
                                "--no-requeue",
                                "-J",
                                so.job_name_prefix + ":" + spec.id.name,
                                "-N",
                                "1",
                                "-n",
                                "1",
                                "--signal=B:TERM@" + std::to_string(so.term_grace_seconds)};
  const auto& partition = spec.spare && !so.spare_partition.empty()          ? so.spare_partition
                          : spec.preemptible && !so.worker_partition.empty() ? so.worker_partition
                                                                             : so.partition;
  if (!partition.empty()) a.insert(a.end(), {"-p", partition});
  if (!spec.host.empty()) a.insert(a.end(), {"-w", spec.host});
  if (!so.account.empty()) a.insert(a.end(), {"-A", so.account});
  if (!so.qos.empty()) a.insert(a.end(), {"-q", so.qos});
  if (!so.time_limit.empty()) a.insert(a.end(), {"-t", so.time_limit});
  if (spec.need.cpus > 0)
    a.push_back("--cpus-per-task=" + std::to_string(static_cast<int>(std::ceil(spec.need.cpus))));
  if (spec.need.memory_bytes > 0)
    a.push_back("--mem=" + std::to_string((spec.need.memory_bytes + (1 << 20) - 1) >> 20) + "M");
  if (spec.need.gpus > 0) a.push_back("--gres=gpu:" + std::to_string(spec.need.gpus));
  a.push_back("--output=" + (spec.log_file.empty() ? std::string("/dev/null") : spec.log_file));
  a.push_back("--open-mode=append");
  if (!spec.working_dir.empty()) a.push_back("--chdir=" + spec.working_dir);
  a.insert(a.end(), so.sbatch_args.begin(), so.sbatch_args.end());
  std::string cmd = "--wrap=exec";
  auto word = [&cmd](const std::string& w) { cmd.append(1, ' ').append(w); };
  if (!spec.env.empty() || !spec.inherit_env) {
    word("env");
    if (!spec.inherit_env) word("-i");
    for (const auto& [k, v] : spec.env) word(shell_quote(k + "=" + v));
  }
  word(shell_quote(program));
  for (std::size_t i = 1; i < spec.argv.size(); ++i) word(shell_quote(spec.argv[i]));
  a.push_back(std::move(cmd));
  return a;
}

std::map<long, std::string> parse_squeue(const std::string& text) {
  std::map<long, std::string> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto bar = line.find('|');
    if (bar == std::string::npos || bar == 0) continue;
    char* end = nullptr;
    long id = std::strtol(line.c_str(), &end, 10);
    if (end != line.c_str() + bar || id <= 0) continue;
    m[id] = line.substr(bar + 1);
  }
  return m;
}

std::string scontrol_field(const std::string& text, const std::string& key) {
  auto at = text.find(" " + key + "=");
  if (at == std::string::npos) {
    if (text.rfind(key + "=", 0) != 0) return {};
    at = 0;
  } else {
    at += 1;
  }
  at += key.size() + 1;
  auto end = text.find_first_of(" \n", at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::optional<exit_status> parse_scontrol_job(const std::string& text) {
  std::string state = scontrol_field(text, "JobState"), code = scontrol_field(text, "ExitCode");
  if (state.empty()) return std::nullopt;
  exit_status s;
  // A preempted job whose process ends on the preemption's SIGTERM is FAILED or COMPLETED to
  // Slurm; its PreemptTime says what really happened.
  std::string preempt = scontrol_field(text, "PreemptTime");
  s.state = !preempt.empty() && preempt != "None" && preempt != "Unknown" ? "PREEMPTED" : state;
  auto colon = code.find(':');
  if (colon != std::string::npos) {
    s.code = std::atoi(code.c_str());
    s.signal = std::atoi(code.c_str() + colon + 1);
  } else {
    s.code = -1;
  }
  return s;
}

bool terminal_state(const std::string& s) {
  static const char* const states[] = {"COMPLETED", "FAILED",  "CANCELLED",     "PREEMPTED",
                                       "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL",
                                       "DEADLINE",  "REVOKED", "SPECIAL_EXIT"};
  for (const char* t : states)
    if (s.rfind(t, 0) == 0) return true;  // "CANCELLED by 0" carries a suffix
  return false;
}

}  // namespace troupe::cluster::slurm
