#include "troupe/cluster/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster {

namespace {
constexpr std::string_view replaced_suffix = " (deleted)";

expected<std::string> exe_link() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0)
    return make_unexpected(cluster_errc::launch_failed,
                           std::string("/proc/self/exe: cannot be read: ") + std::strerror(errno));
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

bool replaced(const std::string& target) {
  return target.size() > replaced_suffix.size() &&
         target.compare(target.size() - replaced_suffix.size(), replaced_suffix.size(), replaced_suffix) == 0;
}
}  // namespace

expected<std::string> self_exe() {
  auto target = exe_link();
  if (target && replaced(*target)) target->resize(target->size() - replaced_suffix.size());
  return target;
}

expected<std::string> self_exe_to_run() {
  auto target = exe_link();
  if (target && replaced(*target)) return std::string("/proc/self/exe");
  return target;
}

std::optional<process_stat> read_process_stat(int pid) {
  if (pid <= 0) return std::nullopt;
  // read(2), not an istreambuf_iterator: a process reaped between the open and the read makes the
  // read fail with ESRCH, which libstdc++'s filebuf throws as ios_base::failure (it escaped the
  // runner once: "run: basic_filebuf::underflow error reading the file: No such process").
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;  // gone (ESRCH) or unreadable: no stat
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // The command name (field 2) is in parentheses and may itself hold spaces or ')'.
  auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  process_stat st;
  std::string skip;
  if (!(fields >> st.state >> st.ppid >> st.pgid)) return std::nullopt;
  for (int field = 6; field < 22; ++field)
    if (!(fields >> skip)) return std::nullopt;
  if (!(fields >> st.start_time)) return std::nullopt;
  return st;
}

bool process_alive(int pid, std::optional<std::uint64_t> start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;  // EPERM: exists, not ours
  auto st = read_process_stat(pid);
  if (!st) return false;
  if (st->state == 'Z' || st->state == 'X' || st->state == 'x') return false;
  return !start_time || *start_time == st->start_time;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace troupe::cluster
