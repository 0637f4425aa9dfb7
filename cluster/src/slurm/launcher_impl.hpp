// The Slurm launcher's state (launcher.hpp), shared by launcher.cpp (launch, the watcher's polls,
// exit reports, kill_all) and launcher_asks.cpp (fence and signal, which the watcher sends).
#pragma once

#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "slurm/commands.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster::slurm {

struct launcher::impl {
  launcher_options lo;
  options so;
  std::string program;  // this binary, for specs that leave program empty
  resources total;

  struct node {
    node_handle h;
    resources need;
    std::string state = "PENDING";
    std::string host;    // where squeue last listed it running ("" while it waits)
    std::string reason;  // why it waits, as squeue said at the last poll (PENDING only)
    std::optional<exit_status> final;
    std::string log_file;         // where Slurm writes its output (--output), on the node's filesystem
    std::uint64_t log_start = 0;  // the log's size here at submission (exit_trace)
    // What the runner asked (launcher_asks.cpp), for the watcher to send: a fence (a kill) and
    // signals in order; while the controller does not answer, until it does.
    bool fence = false;
    std::vector<int> signals;
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, node> nodes;  // by serial
  std::uint64_t next_serial = 1;
  std::string last_error;
  std::optional<troupe::clock::time_point> down_since;  // squeue failing since (on lo.clock)
  bool stopping = false;
  bool asks_due = false;  // a fence() or signal() since the watcher last looked: it looks again at once
  std::thread watcher;

  expected<tool_result> tool(const std::vector<std::string>& argv) const {
    return run_tool(argv, so.bin_dir, so.command_timeout, 0, lo.clock);
  }
  // The controller took a scancel: done, or refused for a reason of Slurm's own (a job that is
  // over: "Invalid job id", "already completing"), not for want of contact; else try again.
  static bool taken(const expected<tool_result>& r) {
    return r && (r->code == 0 || r->err.find("contact") == std::string::npos);
  }
  void record(long job) const {
    if (so.jobs_file.empty()) return;
    std::ofstream(so.jobs_file, std::ios::app) << job << "\n";
  }
  // A Slurm command failed: the controller does not answer (or the commands are broken).
  void note_error(std::string e) {
    std::lock_guard lock(mu);
    last_error = std::move(e);
    if (!down_since) down_since = lo.clock.get().now();
  }
  std::vector<long> active_jobs() const {
    std::lock_guard lock(mu);
    std::vector<long> ids;
    for (const auto& [s, n] : nodes)
      if (!n.final) ids.push_back(n.h.pid);
    return ids;
  }
  // The final status of a job squeue no longer lists as live: slurmctld's, else accounting's (a
  // job it has forgotten), else UNKNOWN.
  exit_status final_status(long job) const {
    auto r = tool({"scontrol", "show", "job", "-o", std::to_string(job)});
    if (r && r->code == 0)
      if (auto s = parse_scontrol_job(r->out)) return *s;
    auto a =
        tool({"sacct", "-n", "-P", "-X", "-j", std::to_string(job), "-o", "State,ExitCode,Reason,NodeList"});
    if (a && a->code == 0)
      if (auto s = parse_sacct_job(a->out)) return *s;
    exit_status unknown;
    unknown.code = -1;
    unknown.state = "UNKNOWN";
    return unknown;
  }
  // The log file of job `job` and its size at submission.
  std::pair<std::string, std::uint64_t> log_of(long job) const {
    std::lock_guard lock(mu);
    for (const auto& [serial, n] : nodes)
      if (n.h.pid == job) return {n.log_file, n.log_start};
    return {};
  }
  // One look at every node's state; false when squeue failed (the controller does not answer).
  bool poll_once();
  // Records what fence() or signal() asked of node `h` (`ask` changes it) and wakes the watcher;
  // no_such_node once the node was reported.
  expected<void> ask(const node_handle& h, const std::function<void(node&)>& ask);
  // One try at each fence and signal asked for (launcher_asks.cpp); what is sent, or was for a
  // node that is over, is done with; the rest is tried again at the next look.
  void send_asked();
  // One try at sending `sig` to job `job` in `state`: false to try again (the controller did not
  // answer).
  bool send_signal(long job, int sig, const std::string& state) const;
  // squeue's state of each of `ids` it lists (none: it knows none of them any more); nullopt, the
  // error noted, when squeue failed.
  std::optional<std::map<long, squeue_job>> squeue_states(const std::vector<long>& ids);
  // Job `id` is as `now` says, or over with `fin` (then added to `done`); squeue answered.
  void note_state(long id, const std::optional<exit_status>& fin, const squeue_job& now,
                  std::vector<std::pair<node_handle, exit_status>>& done);
  void deliver(const std::vector<std::pair<node_handle, exit_status>>& done);
  void run() {
    std::unique_lock lock(mu);
    while (!stopping) {
      asks_due = false;
      lock.unlock();
      // Fences and signals wait for a controller that answers squeue: each Slurm command to one
      // that does not costs its own retries (9 s; scancel --signal 18 s), and no node can be
      // reached without it anyway.
      if (poll_once()) send_asked();
      lock.lock();
      // Must poll: Slurm tells no one when a job's state changes. One poll_interval on the
      // launcher's clock between looks; stopping (and an ask) ends the wait at once.
      auto& clk = lo.clock.get();
      troupe::wait_until(clk, cv, lock, clk.now() + so.poll_interval, [&] { return stopping || asks_due; });
    }
  }
};

}  // namespace troupe::cluster::slurm
