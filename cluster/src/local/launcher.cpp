#include "troupe/cluster/local/launcher.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "local/hosts.hpp"
#include "local/launcher_impl.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {

std::string exit_status::to_string() const {
  std::string s =
      signal != 0 ? "killed by " + signal_name(signal) : "exited with code " + std::to_string(code);
  return state.empty() ? s : s + " (" + state + ")";
}

}  // namespace troupe::cluster

namespace troupe::cluster::local {

namespace {

unexpected unknown_handle(const node_handle& h) {
  return make_unexpected(cluster_errc::no_such_node,
                         "node " + h.id.to_string() + " (launch " + std::to_string(h.serial) + ")");
}
}  // namespace

expected<std::unique_ptr<launcher>> launcher::create(launcher_options options) {
  return create(std::move(options), {});
}

expected<std::unique_ptr<launcher>> launcher::create(launcher_options options, remote_hosts hosts) {
  if (!hosts.hosts.empty() && hosts.command.empty())
    return make_unexpected(cluster_errc::invalid_spec, "hosts are listed but no command reaches them");
  auto p = std::make_unique<impl>();
  p->hosts = std::move(hosts);
  if (options.capacity) {
    p->capacity = *options.capacity;
  } else {
    auto cap = local_capacity();
    if (!cap) return cap.err();
    p->capacity = *cap;
  }
  p->options = std::move(options);
  p->wake_fd = unique_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!p->wake_fd)
    return make_unexpected(cluster_errc::launch_failed, std::string("eventfd: ") + std::strerror(errno));
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<launcher>(new launcher(std::move(p)));
}

launcher::launcher(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

expected<void> launcher::check_host(const std::string& host) const {
  if (impl_->hosts.hosts.empty()) return cluster::launcher::check_host(host);
  return known_host(impl_->hosts, host);
}

launcher::~launcher() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  kill_all();
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

expected<node_handle> launcher::launch(const node_spec& spec) {
  if (impl_->on_service_thread()) return impl_->do_launch(spec);  // from the exit callback
  std::future<expected<node_handle>> result;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping)
      return make_unexpected(cluster_errc::launch_failed,
                             "node " + spec.id.to_string() + ": the launcher is stopping");
    impl_->requests.push_back(spawn_request{spec, {}});
    result = impl_->requests.back().result.get_future();
  }
  impl_->wake();
  return result.get();
}

expected<void> launcher::signal(const node_handle& h, int sig) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->children.find(h.serial);
  if (it == impl_->children.end() || it->second.status) return unknown_handle(h);
  // The group leader is not reaped yet (we hold the lock the reaper needs), so the group id
  // cannot name anyone else's group.
  if (::kill(-it->second.handle.pid, sig) != 0 && errno != ESRCH)
    return make_unexpected(cluster_errc::invalid_spec, "signal " + std::to_string(sig) + " to " +
                                                           h.id.to_string() + ": " + std::strerror(errno));
  return {};
}

expected<void> launcher::fence(const node_handle& h) {
  // SIGKILL needs no cooperation: a stopped (SIGSTOP) or hung process dies at once, and with it
  // whatever it started in its group. The reaper reports the exit as for any other.
  return signal(h, SIGKILL);
}

expected<std::optional<exit_status>> launcher::poll(const node_handle& h) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->children.find(h.serial);
  if (it == impl_->children.end()) return unknown_handle(h);
  return it->second.status;
}

expected<exit_status> launcher::wait(const node_handle& h, std::chrono::milliseconds timeout) {
  if (impl_->on_service_thread())
    return make_unexpected(cluster_errc::invalid_spec, "wait() called from the exit callback");
  std::unique_lock lock(impl_->mu);
  auto it = impl_->children.find(h.serial);
  if (it == impl_->children.end()) return unknown_handle(h);
  child& c = it->second;  // std::map nodes are stable
  auto& clk = impl_->options.clock.get();
  if (!troupe::wait_until(clk, impl_->cv, lock, clk.now() + timeout, [&] { return c.status.has_value(); }))
    return make_unexpected(cluster_errc::timed_out, "node " + h.id.to_string() + " still runs after " +
                                                        std::to_string(timeout.count()) + " ms");
  return *c.status;
}

void launcher::kill_all() noexcept {
  std::unique_lock lock(impl_->mu);
  impl_->standby_spec.reset();  // no standby outlives kill_all(): none is started any more
  impl_->signal_all_locked(SIGKILL);
  if (impl_->on_service_thread()) return;
  lock.unlock();
  impl_->wake();
  lock.lock();
  // Loop: a launch may have slipped in between the signal and the wait.
  while (impl_->unreported_locked() > 0 || impl_->standby || impl_->standby_starting) {
    impl_->cv.wait_for(lock, std::chrono::milliseconds(100));
    impl_->signal_all_locked(SIGKILL);
  }
}

std::vector<node_handle> launcher::running() const {
  std::lock_guard lock(impl_->mu);
  std::vector<node_handle> out;
  for (const auto& [serial, c] : impl_->children)
    if (!c.status) out.push_back(c.handle);
  return out;
}

resources launcher::capacity() const {
  std::lock_guard lock(impl_->mu);
  return impl_->capacity;
}

resources launcher::reserved() const {
  std::lock_guard lock(impl_->mu);
  return impl_->reserved;
}

}  // namespace troupe::cluster::local
