// The local launcher's standby (keep_standby, local/launcher.hpp): started, reaped and adopted on
// the service thread, like every node process.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "local/launcher_impl.hpp"
#include "node_output.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/standby.hpp"

namespace troupe::cluster::local {

namespace {

// Kills and reaps a standby that is no longer wanted (it is this thread's child, never adopted).
void discard(standby_child& sb, const std::string& why) noexcept {
  ::kill(-sb.pid, SIGKILL);
  int ws = 0;
  while (::waitpid(sb.pid, &ws, 0) < 0 && errno == EINTR) {
  }
  append_log_line(sb.log_file,
                  launcher_line + utc_now() + ": standby pid " + std::to_string(sb.pid) + " " + why);
}

// Why the log file cannot be appended to; "" when it can (or there is none).
std::string unwritable(const std::string& path) {
  if (path.empty()) return "";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  return "";
}

bool send_all(int fd, const std::string& bytes) noexcept {
  for (std::size_t at = 0; at < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

bool launcher::keep_standby(const node_spec& standby) {
  if (standby.argv.empty() || !valid_node_name(standby.id.name)) return false;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return false;
    impl_->standby_spec = standby;
    impl_->standby_deaths = 0;
    impl_->standby_due = {};
  }
  impl_->wake();
  return true;
}

void launcher::impl::tend_standby() noexcept {
  node_spec spec;
  {
    std::lock_guard lock(mu);
    if (!standby_spec || standby || stopping || standby_deaths >= max_standby_deaths ||
        options.clock.get().now() < standby_due)
      return;
    spec = *standby_spec;
    standby_starting = true;  // kill_all() waits for it
  }
  auto failed = [&](const std::string& why) {
    spdlog::warn("launcher: cannot start a standby: {}", why);
    std::lock_guard lock(mu);
    standby_starting = false;
    cv.notify_all();
    ++standby_deaths;
    standby_due = options.clock.get().now() + standby_delay;
  };
  auto prepared = prepare_spawn(spec);
  if (!prepared) return failed(prepared.err().to_string());
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return failed(std::string("socketpair: ") + std::strerror(errno));
  unique_fd ours(sv[0]);
  prepared->stdin_fd = unique_fd(sv[1]);
  auto proc = spawn_process(*prepared, spec);
  if (!proc) return failed(proc.err().to_string());
  prepared->stdin_fd = unique_fd();  // the child's end: ours must see EOF/EPIPE once it is gone
  standby_child sb{proc->pid, std::move(proc->pidfd), std::move(ours), spec.log_file};
  std::unique_lock lock(mu);
  if (!standby_spec || stopping) {  // kill_all() came meanwhile
    lock.unlock();
    discard(sb, "not wanted any more");
    lock.lock();
  } else {
    standby = std::move(sb);
  }
  standby_starting = false;
  cv.notify_all();
}

void launcher::impl::reap_standby() noexcept {
  std::string log_file;
  exit_status st;
  int pid = 0;
  bool give_up = false;
  {
    std::lock_guard lock(mu);
    if (!standby) return;
    auto r = try_reap(standby->pid);
    if (!r) return;
    st = *r;
    pid = standby->pid;
    log_file = standby->log_file;
    standby.reset();
    if (standby_spec) {
      give_up = ++standby_deaths >= max_standby_deaths;
      standby_due = options.clock.get().now() + standby_delay;
    }
    cv.notify_all();
  }
  append_log_line(log_file,
                  launcher_line + utc_now() + ": standby pid " + std::to_string(pid) + " " + st.to_string());
  if (give_up)
    spdlog::warn("launcher: {} standbys died before they were used (see {}); launching without one",
                 max_standby_deaths, log_file);
}

std::optional<node_handle> launcher::impl::adopt_standby(const node_spec& spec, std::uint64_t serial,
                                                         const resources& need, const std::string& host) {
  standby_child sb;
  {
    std::lock_guard lock(mu);
    if (!spec.standby_ok || !standby || !standby_spec || spec.program != standby_spec->program)
      return std::nullopt;
    sb = std::move(*standby);
    standby.reset();
    standby_deaths = 0;
    standby_due = options.clock.get().now() + standby_delay;  // not while this node starts
  }
  auto path = spec.program.empty() ? self_exe() : expected<std::string>(spec.program);
  const std::string pid = std::to_string(sb.pid);
  if (auto bad = unwritable(spec.log_file); !bad.empty()) {  // the ordinary launch reports it
    discard(sb, "not used: " + spec.log_file + ": " + bad);
    return std::nullopt;
  }
  append_log_line(spec.log_file,
                  header_line(spec, path ? *path : spec.program) + " (standby pid " + pid + ")");
  const std::uint64_t log_start = file_size(spec.log_file).value_or(0);
  bool sent = send_all(sb.channel.get(), encode_standby_identity({spec.log_file, spec.env, spec.argv}));
  sb.channel = unique_fd();  // EOF: the identity is complete
  if (!sent) {
    append_log_line(spec.log_file,
                    launcher_line + utc_now() + ": standby pid " + pid + " was gone; starting a process");
    discard(sb, "gone before it was used");
    return std::nullopt;
  }
  append_log_line(sb.log_file,
                  launcher_line + utc_now() + ": standby pid " + pid + " becomes " + spec.id.to_string());
  node_handle h{serial, spec.id, sb.pid, host == "localhost" ? std::string() : host};
  std::lock_guard lock(mu);
  children[serial] = child{h, std::move(sb.pidfd), need, spec.log_file, log_start, host, std::nullopt, false};
  return h;
}

}  // namespace troupe::cluster::local
