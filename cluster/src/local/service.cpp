// The local launcher's service thread: every fork happens here (PR_SET_PDEATHSIG follows the
// forking thread) and every child is reaped here, by pid.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "local/hosts.hpp"
#include "local/launcher_impl.hpp"
#include "node_output.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster::local {

namespace {
constexpr int poll_interval_ms = 200;
}  // namespace

void launcher::impl::wake() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd.get(), &one, sizeof one);
}

std::size_t launcher::impl::unreported_locked() const noexcept {
  std::size_t n = 0;
  for (const auto& [serial, c] : children) n += c.reported ? 0 : 1;
  return n;
}

void launcher::impl::signal_all_locked(int sig) noexcept {
  for (const auto& [serial, c] : children)
    if (!c.status) ::kill(-c.handle.pid, sig);
  if (standby) ::kill(-standby->pid, sig);  // not reaped yet (we hold mu): its group is still its own
}

std::vector<pollfd> launcher::impl::poll_set() {
  std::lock_guard lock(mu);
  std::vector<pollfd> fds;
  if (stop && requests.empty() && unreported_locked() == 0 && !standby) return fds;
  if (stop) signal_all_locked(SIGKILL);  // anything launched after the destructor's kill_all()
  fds.push_back({wake_fd.get(), POLLIN, 0});
  for (const auto& [serial, c] : children)
    if (!c.status && c.pidfd) fds.push_back({c.pidfd.get(), POLLIN, 0});
  if (standby && standby->pidfd) fds.push_back({standby->pidfd.get(), POLLIN, 0});
  return fds;
}

void launcher::impl::run() noexcept {
  for (;;) {
    auto fds = poll_set();
    if (fds.empty()) return;
    ::poll(fds.data(), fds.size(), poll_interval_ms);
    if (fds[0].revents & POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd.get(), &v, sizeof v);
    }
    serve_requests();
    reap();
    reap_standby();
    tend_standby();
  }
}

void launcher::impl::serve_requests() {
  for (;;) {
    spawn_request req;
    {
      std::lock_guard lock(mu);
      if (requests.empty()) return;
      req = std::move(requests.front());
      requests.pop_front();
    }
    req.result.set_value(do_launch(req.spec));
  }
}

expected<std::string> launcher::impl::admit(const node_spec& spec) {
  // Also refuses replacements launched by the exit callback while kill_all() runs in the
  // destructor, which would otherwise be killed and replaced for ever.
  if (stopping)
    return make_unexpected(cluster_errc::launch_failed,
                           "node " + spec.id.to_string() + ": the launcher is stopping");
  if (!valid_node_name(spec.id.name))
    return make_unexpected(cluster_errc::invalid_spec, "node name '" + spec.id.name + "' is not valid");
  if (spec.argv.empty())
    return make_unexpected(cluster_errc::invalid_spec, "node " + spec.id.to_string() + ": argv is empty");
  for (const auto& [serial, c] : children)
    if (!c.status && c.handle.id.name == spec.id.name)
      return make_unexpected(cluster_errc::already_exists,
                             "node " + spec.id.name + " already runs as " + c.handle.id.to_string());
  std::string host;
  if (!hosts.hosts.empty()) {
    std::map<std::string, int> used;
    for (const auto& [serial, c] : children)
      if (!c.status) ++used[c.host];
    auto h = pick_host(hosts, used, spec.host, spec.id.to_string(), spec.avoid);
    if (!h) return h.err();
    if (*h != "localhost") return *h;  // another host's capacity is its slots
    host = *h;
  }
  if (!(reserved + spec.need).fits_in(capacity))
    return make_unexpected(cluster_errc::insufficient_resources,
                           "node " + spec.id.to_string() + " needs " + spec.need.to_string() + "; " +
                               reserved.to_string() + " of " + capacity.to_string() + " already reserved");
  return host;
}

expected<launcher::impl::slot> launcher::impl::reserve(const node_spec& spec) {
  std::lock_guard lock(mu);
  auto placed = admit(spec);
  if (!placed) return placed.err();
  slot s;
  s.host = *placed;
  if (s.host.empty() || s.host == "localhost") s.need = spec.need;
  reserved += s.need;
  // Launches run one at a time on the service thread: nobody takes the slot before the child is
  // recorded.
  s.serial = next_serial++;
  return s;
}

expected<node_handle> launcher::impl::do_launch(const node_spec& spec) {
  auto reserved_slot = reserve(spec);
  if (!reserved_slot) return reserved_slot.err();
  const slot& s = *reserved_slot;
  auto fail = [&](error e) {
    std::lock_guard lock(mu);
    reserved -= s.need;
    return e;
  };
  node_spec remote;
  if (!s.host.empty() && s.host != "localhost") {
    auto self = self_exe();
    if (!self) return fail(self.err());
    remote = on_host(spec, s.host, hosts.command, *self);
  }
  if (remote.argv.empty())
    if (auto adopted = adopt_standby(spec, s.serial, s.need, s.host)) return *adopted;
  const node_spec& run = remote.argv.empty() ? spec : remote;
  auto prepared = prepare_spawn(run);
  if (!prepared) return fail(prepared.err());
  const std::uint64_t log_start = file_size(spec.log_file).value_or(0);  // past the header
  auto proc = spawn_process(*prepared, run);
  if (!proc) {
    append_log_line(spec.log_file, launcher_line + utc_now() + ": " + proc.err().to_string());
    return fail(proc.err());
  }
  node_handle h{s.serial, spec.id, proc->pid, s.host == "localhost" ? std::string() : s.host};
  std::lock_guard lock(mu);
  child& c = children[s.serial];
  c.handle = h;
  c.host = s.host;
  c.pidfd = std::move(proc->pidfd);
  c.need = s.need;
  c.log_file = spec.log_file;
  c.log_start = log_start;
  return h;
}

// Before reaping, SIGKILLs the process group: while the zombie leader is not reaped, the group id
// cannot have been reused.
std::optional<exit_status> try_reap(int pid) {
  siginfo_t si{};
  exit_status st;
  if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) return std::nullopt;
    // ECHILD: reaped by someone else (SIGCHLD ignored, or waitpid(-1) elsewhere). The pid may
    // already name another process, so its group is not signalled; the status is unknown.
    st.code = -1;
    return st;
  }
  if (si.si_pid == 0) return std::nullopt;  // still running
  ::kill(-pid, SIGKILL);
  int ws = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &ws, 0)) < 0 && errno == EINTR) {
  }
  if (r != pid)
    st.code = -1;
  else if (WIFSIGNALED(ws))
    st.signal = WTERMSIG(ws);
  else
    st.code = WEXITSTATUS(ws);
  return st;
}

void launcher::impl::reap() noexcept {
  std::vector<std::pair<child*, exit_status>> done;
  {
    std::lock_guard lock(mu);
    for (auto& [serial, c] : children) {
      if (c.status) continue;
      auto st = try_reap(c.handle.pid);
      if (!st) continue;
      // A bounded read of the node's own log (exit_trace), before the footer goes in.
      read_node_output(c.log_file, c.log_start, st->trace, launcher_line);
      c.status = st;
      c.pidfd = unique_fd();
      reserved -= c.need;
      done.emplace_back(&c, *st);
    }
    if (done.empty()) return;
    cv.notify_all();
  }
  // Only this thread erases or reports children, so the pointers stay valid unlocked.
  for (auto& [c, st] : done) {
    append_log_line(c->log_file, launcher_line + utc_now() + ": " + c->handle.id.to_string() + " pid " +
                                     std::to_string(c->handle.pid) + " " + st.to_string());
    if (options.on_exit) {
      try {
        options.on_exit(c->handle, st);
      } catch (const std::exception& e) {
        spdlog::error("launcher: the exit callback for {} threw: {}", c->handle.id.to_string(), e.what());
      } catch (...) {
        spdlog::error("launcher: the exit callback for {} threw", c->handle.id.to_string());
      }
    }
  }
  std::lock_guard lock(mu);
  for (auto& [c, st] : done) c->reported = true;
  cv.notify_all();
}

}  // namespace troupe::cluster::local
