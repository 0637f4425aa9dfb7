// `troupe stop` and the dashboard's stop (client.hpp): through the runner, or, while it still
// prepares the job, through a request file it looks for.
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>

#include "client_session.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

using namespace client_detail;

namespace {
// Asks the runner of the connected session to stop the job; returns once it has recorded the stop.
expected<void> ask_stop(session& s, const std::string& who) {
  auto o = wire::job();
  o.body.initStop().setReason(who);
  auto reply = s.rpc->call({"runner", "runner", std::move(o.out)}, std::chrono::seconds(3));
  if (!reply) return reply.err();
  return {};
}
}  // namespace

expected<void> request_stop(const std::string& job_dir, const std::string& who) {
  auto s = connect_runner(job_dir);
  if (!s) return s.err();
  return ask_stop(**s, who);
}

namespace {
// A job still starting (no nodes.json) is stopped by a request file its runner looks for while it
// prepares (stop_request_path); returns once the runner is gone (up to `wait`). nullopt: the job is
// past starting (or not running), the usual path.
std::optional<expected<void>> stop_starting(const std::string& job_dir, troupe::clock& clk,
                                            troupe::clock::duration wait) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir || !starting_runner(*dir)) return std::nullopt;
  if (auto w = cluster::write_file_atomic(cluster::stop_request_path(dir->path()), "troupe stop\n"); !w)
    return expected<void>(w.err());
  const auto until = clk.now() + wait;
  std::error_code ec;
  while (dir->runner_pid() && clk.now() < until) {
    // It started its nodes meanwhile (and will not look again): the usual stop, through the runner.
    if (std::filesystem::exists(dir->nodes_path(), ec)) return std::nullopt;
    clk.sleep_for(std::chrono::milliseconds(20));
  }
  if (dir->runner_pid())
    return expected<void>(make_unexpected(core_errc::io_error, "job " + dir->job_id() +
                                                                   " was asked to stop while starting; its "
                                                                   "runner has not ended yet"));
  return expected<void>();
}
}  // namespace

// The runner took the connection and then dropped it without answering the stop: said as a runner
// found ending or ended is (it read "runner went down before replying: runner/runner").
error stop_unanswered(const std::string& job_dir, troupe::clock& clk, error e) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return e;
  const auto until = clk.now() + std::chrono::seconds(2);
  while (!read_result(*dir).is_object() && clk.now() < until) clk.sleep_for(std::chrono::milliseconds(20));
  if (!read_result(*dir).is_object()) return e;
  if (const auto how = ended_as(*dir); !how.empty())
    return error(core_errc::invalid_argument, "job " + dir->job_id() + " is not running: it ended (" + how +
                                                  "; see " + dir->result_path() + ")");
  return dir->runner_pid() ? unreachable_runner(*dir, "", std::move(e)) : e;
}

expected<void> stop_job(const std::string& job_dir, troupe::clock& clk) {
  if (auto starting = stop_starting(job_dir, clk, std::chrono::seconds(60))) return *starting;
  auto s = connect_runner(job_dir, true);
  if (!s) return s.err();
  if (auto r = ask_stop(**s, "troupe stop"); !r) return stop_unanswered(job_dir, clk, std::move(r).err());
  auto& net = *(*s)->net;
  // Returns once the runner has stopped the job and exited: its connection drops (the endpoint's
  // peer-down callback; the state is shared with it, which may outlive this call).
  struct dropped {
    std::mutex mu;
    std::condition_variable cv;
    bool down = false;
  };
  auto d = std::make_shared<dropped>();
  net.on_peer_down([d](const peer_event& e) {
    if (e.node.name != "runner") return;
    std::lock_guard lk(d->mu);
    d->down = true;
    d->cv.notify_all();
  });
  std::unique_lock lk(d->mu);
  auto gone = [&] { return d->down || !net.connected("runner"); };  // it may have dropped already
  if (!troupe::wait_until(clk, d->cv, lk, clk.now() + std::chrono::seconds(15), gone))
    return make_unexpected(core_errc::io_error, "the runner did not stop within 15 s");
  lk.unlock();
  // Its connection closes once the nodes are down; the runner then writes the model (a stopped
  // job's too: up to its export's 10 minutes) and result.json, and exits, releasing runner.lock.
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return {};
  const auto limit = clk.now() + std::chrono::minutes(11);
  while (dir->runner_pid()) {
    if (clk.now() > limit)
      return make_unexpected(core_errc::io_error, "the runner did not exit within 11 minutes");
    clk.sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

}  // namespace troupe::control
