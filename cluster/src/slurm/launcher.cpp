#include "troupe/cluster/slurm/launcher.hpp"

#include <signal.h>

#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "node_output.hpp"
#include "slurm/commands.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

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
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, node> nodes;  // by serial
  std::uint64_t next_serial = 1;
  std::string last_error;
  std::optional<troupe::clock::time_point> down_since;  // squeue failing since (on lo.clock)
  bool stopping = false;
  std::thread watcher;

  expected<tool_result> tool(const std::vector<std::string>& argv) const {
    return run_tool(argv, so.bin_dir, so.command_timeout, 0, lo.clock);
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
  void poll_once();
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
      lock.unlock();
      poll_once();
      lock.lock();
      // Must poll: Slurm tells no one when a job's state changes. One poll_interval on the
      // launcher's clock between looks; stopping ends the wait at once.
      auto& clk = lo.clock.get();
      troupe::wait_until(clk, cv, lock, clk.now() + so.poll_interval, [&] { return stopping; });
    }
  }
};

std::optional<std::map<long, squeue_job>> launcher::impl::squeue_states(const std::vector<long>& ids) {
  std::string list;
  for (long id : ids) {
    if (!list.empty()) list.append(1, ',');
    list.append(std::to_string(id));
  }
  auto r = tool({"squeue", "-h", "-t", "all", "-j", list, "-o", "%i|%T|%N|%r"});
  if (r && r->code == 0) return parse_squeue(r->out);
  // squeue -j fails outright when none of the ids is known any more; scontrol tells each.
  if (r && r->err.find("Invalid job id") != std::string::npos) return std::map<long, squeue_job>{};
  note_error("squeue: " + (r ? r->err : r.err().to_string()));
  return std::nullopt;
}

void launcher::impl::note_state(long id, const std::optional<exit_status>& fin, const squeue_job& now,
                                std::vector<std::pair<node_handle, exit_status>>& done) {
  std::lock_guard lock(mu);
  last_error.clear();
  down_since.reset();
  for (auto& [s, n] : nodes) {
    if (n.h.pid != id || n.final) continue;
    if (fin) {
      n.final = fin;
      n.state = fin->state;
      done.emplace_back(n.h, *fin);
    } else {
      n.state = now.state;
      n.host = now.state == "RUNNING" ? now.nodes : std::string();
      n.reason = now.state == "PENDING" ? now.reason : std::string();
    }
  }
}

void launcher::impl::poll_once() {
  auto ids = active_jobs();
  if (ids.empty()) return;
  auto live = squeue_states(ids);
  if (!live) return;
  std::vector<std::pair<node_handle, exit_status>> done;
  for (long id : ids) {
    auto it = live->find(id);
    std::optional<exit_status> fin;
    if (it == live->end() || terminal_state(it->second.state)) {
      fin = final_status(id);
      auto [log, start] = log_of(id);
      read_node_output(log, start, fin->trace);
    }
    note_state(id, fin, it == live->end() ? squeue_job{} : it->second, done);
  }
  deliver(done);
}

void launcher::impl::deliver(const std::vector<std::pair<node_handle, exit_status>>& done) {
  if (done.empty()) return;
  cv.notify_all();
  if (lo.on_exit)
    for (const auto& [h, st] : done) lo.on_exit(h, st);
}

expected<std::unique_ptr<launcher>> launcher::create(launcher_options lo, options so) {
  auto p = std::make_unique<impl>();
  p->lo = std::move(lo);
  p->so = std::move(so);
  auto exe = self_exe();
  if (!exe) return exe.err();
  p->program = *exe;
  auto cpus = check_partitions(p->so, p->lo.clock);
  if (!cpus) return cpus.err();
  p->total.cpus = *cpus;
  impl* raw = p.get();
  p->watcher = std::thread([raw] { raw->run(); });
  return std::unique_ptr<launcher>(new launcher(std::move(p)));
}

launcher::launcher(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

launcher::~launcher() {
  kill_all();
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->watcher.joinable()) impl_->watcher.join();
}

expected<node_handle> launcher::launch(const node_spec& spec) {
  if (spec.argv.empty())
    return make_unexpected(cluster_errc::invalid_spec, "node " + spec.id.to_string() + ": empty argv");
  const std::string& program = spec.program.empty() ? impl_->program : spec.program;
  const std::uint64_t log_start = file_size(spec.log_file).value_or(0);
  auto submitted = submit(spec, program, impl_->so, impl_->lo.clock);
  if (!submitted) return submitted.err();
  long job = *submitted;
  impl_->record(job);
  std::lock_guard lock(impl_->mu);
  node_handle h{impl_->next_serial++, spec.id, static_cast<int>(job), spec.host};
  impl_->nodes[h.serial] =
      impl::node{h, spec.need, "PENDING", "", "", std::nullopt, spec.log_file, log_start};
  return h;
}

expected<void> launcher::signal(const node_handle& h, int sig) {
  std::string state;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->nodes.find(h.serial);
    if (it == impl_->nodes.end() || it->second.final)
      return make_unexpected(cluster_errc::no_such_node,
                             "node " + h.id.to_string() + " (Slurm job " + std::to_string(h.pid) + ")");
    state = it->second.state;
  }
  std::vector<std::string> argv = {"scancel"};
  if (sig != SIGKILL && state != "PENDING")
    argv.insert(argv.end(), {"--full", "--signal=" + std::to_string(sig)});
  argv.push_back(std::to_string(h.pid));
  auto r = impl_->tool(argv);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(cluster_errc::no_such_node, "scancel " + std::to_string(h.pid) + ": " + said(*r));
  return {};
}

expected<void> launcher::fence(const node_handle& h) {
  bool known = false;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->nodes.find(h.serial);
    known = it != impl_->nodes.end() && !it->second.final;
  }
  if (!known) return signal(h, SIGKILL);  // answers no_such_node
  // A fenced node must not act again: killed at once (signal_job), not cancelled (a SIGTERM after
  // a SIGCONT, on which a stopped node woke up and left cleanly). A refused signal is retried (under
  // load scancel fails for a running job too: a cancel then woke a SIGSTOPped node, which ran on);
  // only a job Slurm says has not started yet is cancelled (the state this launcher last read may be
  // older), and one Slurm says is over is no node any more.
  auto& clk = impl_->lo.clock.get();
  const auto deadline = clk.now() + impl_->so.command_timeout;
  for (;;) {
    auto killed = slurm::signal_job(h.pid, SIGKILL, impl_->so);
    if (killed) return {};
    auto state = slurm::job_state(h.pid, impl_->so);
    if (state && (*state == "PENDING" || *state == "CONFIGURING")) return signal(h, SIGKILL);
    if (state && (state->empty() || slurm::terminal_state(*state) || *state == "COMPLETING"))
      return make_unexpected(cluster_errc::no_such_node, "node " + h.id.to_string() + " (Slurm job " +
                                                             std::to_string(h.pid) + ") is " +
                                                             (state->empty() ? "gone" : *state));
    if (clk.now() >= deadline) return killed.err();
    impl_->note_error("fence " + h.id.to_string() + ": " + killed.err().to_string() + "; again");
    clk.sleep_for(impl_->so.poll_interval);
  }
}

expected<std::optional<exit_status>> launcher::poll(const node_handle& h) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(h.serial);
  if (it == impl_->nodes.end())
    return make_unexpected(cluster_errc::no_such_node, "node " + h.id.to_string());
  return it->second.final;
}

expected<exit_status> launcher::wait(const node_handle& h, std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  auto it = impl_->nodes.find(h.serial);
  if (it == impl_->nodes.end())
    return make_unexpected(cluster_errc::no_such_node, "node " + h.id.to_string());
  auto& clk = impl_->lo.clock.get();
  if (!troupe::wait_until(clk, impl_->cv, lock, clk.now() + timeout,
                          [&] { return it->second.final.has_value(); }))
    return make_unexpected(cluster_errc::timed_out,
                           "node " + h.id.to_string() + " still " + it->second.state);
  return *it->second.final;
}

// scancel is retried while it cannot reach the controller (bounded by command_timeout); a job
// already over makes scancel fail too, and is not retried for.
void launcher::kill_all() noexcept {
  try {
    auto ids = impl_->active_jobs();
    if (ids.empty()) return;
    std::vector<std::string> argv = {"scancel"};
    for (long id : ids) argv.push_back(std::to_string(id));
    auto& clk = impl_->lo.clock.get();
    auto deadline = clk.now() + impl_->so.command_timeout;
    bool cancelled = false;
    while (!impl_->active_jobs().empty() && clk.now() < deadline) {
      if (!cancelled) {
        auto r = impl_->tool(argv);
        cancelled = r && (r->code == 0 || r->err.find("contact") == std::string::npos);
        if (!cancelled) impl_->note_error("scancel: " + (r ? r->err : r.err().to_string()));
      }
      impl_->poll_once();
      // Must poll: Slurm tells no one when a job leaves squeue. A pause on the launcher's clock (a
      // manual clock moves by it), one poll_interval between looks.
      clk.sleep_for(impl_->so.poll_interval);
    }
  } catch (...) {
  }
}

std::vector<node_handle> launcher::running() const {
  std::lock_guard lock(impl_->mu);
  std::vector<node_handle> v;
  for (const auto& [s, n] : impl_->nodes)
    if (!n.final) v.push_back(n.h);
  return v;
}

resources launcher::capacity() const {
  return impl_->total;
}

resources launcher::reserved() const {
  std::lock_guard lock(impl_->mu);
  resources r;
  for (const auto& [s, n] : impl_->nodes)
    if (!n.final && n.state == "RUNNING") r += n.need;
  return r;
}

std::string launcher::state(const node_handle& h) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(h.serial);
  return it == impl_->nodes.end() || it->second.final ? std::string() : it->second.state;
}

std::string launcher::last_error() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_error;
}

expected<void> launcher::check_host(const std::string& host) const {
  return worker_host(host, impl_->so);
}

std::string launcher::host_of(const node_handle& h) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(h.serial);
  if (it == impl_->nodes.end() || it->second.host.empty()) return h.host;
  return it->second.host;
}

std::string launcher::waiting_why(const node_handle& h) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(h.serial);
  if (it == impl_->nodes.end() || it->second.final || it->second.state != "PENDING") return {};
  const auto& r = it->second.reason;
  return r.empty() || r == "None" ? std::string("PENDING") : "PENDING (" + r + ")";
}

std::optional<launcher::outage_info> launcher::outage() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->down_since) return std::nullopt;
  return outage_info{impl_->last_error, *impl_->down_since};
}

expected<int> launcher::cancel_recorded(const std::string& jobs_file, const options& so) {
  std::ifstream in(jobs_file);
  if (!in) return 0;
  std::vector<std::string> argv = {"scancel"};
  long id;
  while (in >> id) argv.push_back(std::to_string(id));
  if (argv.size() == 1) return 0;
  auto q = run_tool({"squeue", "-h", "-o", "%i|%T"}, so.bin_dir, so.command_timeout);
  if (!q) return q.err();
  auto live = parse_squeue(q->out);
  std::vector<std::string> cancel = {"scancel"};
  for (std::size_t i = 1; i < argv.size(); ++i)
    if (live.count(std::atol(argv[i].c_str()))) cancel.push_back(argv[i]);
  if (cancel.size() == 1) return 0;
  auto r = run_tool(cancel, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  return static_cast<int>(cancel.size() - 1);
}

}  // namespace troupe::cluster::slurm
