#include "troupe/cluster/slurm/launcher.hpp"

#include "node_output.hpp"
#include "slurm/launcher_impl.hpp"
#include "troupe/cluster/errc.hpp"

namespace troupe::cluster::slurm {

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

bool launcher::impl::poll_once() {
  auto ids = active_jobs();
  if (ids.empty()) return true;
  auto live = squeue_states(ids);
  if (!live) return false;
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
  return true;
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
  // While squeue fails, sbatch would too, after Slurm's own retries (9 s on the caller's loop, the
  // runner's): refused at once, submitted again by the caller once the controller answers.
  if (auto o = outage())
    return make_unexpected(
        cluster_errc::launch_failed,
        "sbatch for node " + spec.id.to_string() + ": the Slurm controller does not answer (" + o->why + ")");
  const std::string& program = spec.program.empty() ? impl_->program : spec.program;
  const std::uint64_t log_start = file_size(spec.log_file).value_or(0);
  auto submitted = submit(spec, program, impl_->so, impl_->lo.clock);
  if (!submitted) return submitted.err();
  long job = *submitted;
  impl_->record(job);
  std::lock_guard lock(impl_->mu);
  node_handle h{impl_->next_serial++, spec.id, static_cast<int>(job), spec.host};
  impl_->nodes[h.serial] =
      impl::node{h, spec.need, "PENDING", "", "", std::nullopt, spec.log_file, log_start, false, {}};
  return h;
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
// already over makes scancel fail too, and is not retried for. Once taken, the jobs are awaited as
// they leave squeue for a whole command_timeout from then: tries against a controller that was down
// may have used up the first (the runner then said jobs were left that it had cancelled).
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
        cancelled = impl::taken(r);
        if (cancelled) deadline = clk.now() + impl_->so.command_timeout;
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

// Called by the runner's io thread (troupe scale --host): while squeue fails, sinfo would too, after
// Slurm's own retries (9 s of that thread), so the host is refused at once.
expected<void> launcher::check_host(const std::string& host) const {
  if (auto o = outage())
    return make_unexpected(cluster_errc::launch_failed, "host '" + host +
                                                            "' cannot be checked: the Slurm controller does "
                                                            "not answer (" +
                                                            o->why + "); try again once it does");
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

}  // namespace troupe::cluster::slurm
