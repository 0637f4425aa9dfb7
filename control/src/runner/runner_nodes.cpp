#include <algorithm>
#include <csignal>
#include <set>

#include <spdlog/spdlog.h>

#include "runner.hpp"
#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

namespace {
// A node that dies this often this fast is broken, not unlucky: the job fails rather than spin.
constexpr std::size_t max_deaths = 10;
constexpr auto death_window = std::chrono::seconds(60);
// A node that ends this many times in a row before it joins, without a line of troupe's in its
// output, never starts (its Slurm job cannot launch, its host command fails): the job fails now,
// saying why, rather than after max_deaths relaunches that fail the same way.
constexpr std::size_t max_start_failures = 3;
}  // namespace

cluster::node_args runner::node_args_of(const node_slot& slot) const {
  cluster::node_args a;
  a.master = master_addr_;
  a.role = slot.role;
  a.index = slot.index;
  a.incarnation = slot.id.incarnation;
  a.job_dir = dir_->path();
  a.train_dir = data_.train_dir;
  a.test_dir = data_.test_dir;
  if (slot.role != cluster::node_role::master && !plan_.node_listen.empty())
    a.extra = {"--listen", plan_.node_listen};
  if (slot.role == cluster::node_role::worker) {
    a.extra.push_back("--slot");
    a.extra.push_back(std::to_string(slot.place));
  }
  return a;
}

cluster::node_spec runner::launch_spec_of(const cluster::node_args& a, cluster::node_role role) const {
  bool worker = role == cluster::node_role::worker;
  cluster::resources need;
  if (worker) need.cpus = spec_.cluster.worker_cpus;
  auto ns = cluster::node_launch_spec(a, *dir_, need);
  // Workers may be preempted; the control plane stays on its host (the master's address is fixed).
  ns.preemptible = worker;
  ns.standby_ok = worker;  // a launcher keeps standbys only when keep_standby() asked for them
  if (role == cluster::node_role::master) ns.host = plan_.master_node;
  if (role == cluster::node_role::ps) ns.host = plan_.ps_node;
  // Nodes share the machine: one BLAS thread each, the job's processes are the parallelism.
  ns.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
  return ns;
}

void runner::keep_standby() {
  // libtorch and the module take about a second to load; a native model's worker starts in
  // milliseconds. Other hosts and Slurm start their processes where this launcher cannot keep one.
  if (spec_.nn.model.type != "torchscript" || spec_.cluster.launcher != "local" ||
      !spec_.cluster.hosts.empty())
    return;
  node_slot placeholder = new_slot({"worker-0", 0}, cluster::node_role::worker, 0);
  auto a = node_args_of(placeholder);
  a.extra.push_back("--standby");
  auto ns = launch_spec_of(a, cluster::node_role::worker);
  ns.id = {"standby", 0};
  ns.log_file = dir_->log_path("standby");
  ns.need = {};  // a standby reserves nothing; the node it becomes does
  for (auto& [k, v] : ns.env)
    if (k == "TROUPE_NODE") v = "standby";
  if (launcher_->keep_standby(ns)) spdlog::info("keeping a standby worker ready (log: {})", ns.log_file);
}

expected<void> runner::launch(node_slot& slot) {
  auto a = node_args_of(slot);
  if (auto ok = cluster::validate_node_args(a); !ok) return ok.err();
  bool worker = slot.role == cluster::node_role::worker;
  auto ns = launch_spec_of(a, slot.role);
  ns.spare = worker && spare_slot(slot);
  auto h = launcher_->launch(ns);
  if (!h) return h.err();
  slot.handle = *h;
  slot.seen_by_master.reset();
  slot.joined = false;
  slot.fenced = false;
  slot.ended.clear();
  // A batch backend's "pid" is its job id, not a process of this machine.
  auto st = spec_.cluster.launcher == "local" ? cluster::read_process_stat(h->pid) : std::nullopt;
  slot.start_time = st ? st->start_time : 0;
  if (slot.role == cluster::node_role::master) {
    master_launched_ = clock_.now();
    master_answered_ = false;
  }
  if (slot.role == cluster::node_role::worker)
    spdlog::info("launched {} (pid {}, slot {})", slot.id.to_string(), h->pid, slot.place);
  else
    spdlog::info("launched {} (pid {})", slot.id.to_string(), h->pid);
  return {};
}

std::uint32_t runner::running_workers() const {
  std::uint32_t n = 0;
  for (const auto& [name, s] : nodes_)
    if (s.role == cluster::node_role::worker && s.wanted) ++n;
  return n;
}

std::uint32_t runner::launched_workers() const {
  std::uint32_t n = 0;
  for (const auto& [name, s] : nodes_)
    if (s.role == cluster::node_role::worker && s.wanted && s.handle) ++n;
  return n;
}

// [cluster] spare_partition: the job keeps max_workers workers; the `workers` wanted ones of lowest
// index are its own, the rest are spare (Slurm's spare partition, preempted by any other work). A
// worker's class is decided when it is (re)launched.
bool runner::spare_mode() const {
  return spec_.cluster.launcher == "slurm" && !spec_.cluster.spare_partition.empty();
}

std::uint32_t runner::workers_kept() const {
  return spare_mode() ? spec_.job.max_workers : target_workers_;
}

bool runner::spare_slot(const node_slot& slot) const {
  if (!spare_mode()) return false;
  std::uint32_t below = 0;
  for (const auto& [name, s] : nodes_)
    if (s.role == cluster::node_role::worker && s.wanted && s.index < slot.index) ++below;
  return below >= target_workers_;
}

// The lowest slot no worker process holds (a leaving one keeps its slot until it has exited).
std::size_t runner::free_place() const {
  std::set<std::size_t> used;
  for (const auto& [name, s] : nodes_)
    if (s.role == cluster::node_role::worker && (s.wanted || s.handle)) used.insert(s.place);
  std::size_t p = 0;
  while (used.count(p)) ++p;
  return p;
}

void runner::scale_to(std::uint32_t workers) {
  workers = std::clamp(workers, spec_.job.min_workers, spec_.job.max_workers);
  {
    std::lock_guard lk(mu_);
    if (workers != target_workers_) spdlog::info("scale: {} -> {} workers", target_workers_, workers);
    target_workers_ = workers;
  }
  // Grow: new workers get new indices, never a departed worker's name (the master would refuse
  // its incarnation 0 as stale, and a relaunch would count as a restart).
  const std::uint32_t kept = workers_kept();
  while (running_workers() < kept) {
    std::size_t i = next_worker_index_++;
    auto name = cluster::node_name(cluster::node_role::worker, i);
    auto place = free_place();
    auto& slot = nodes_[name] = new_slot({name, first_incarnation(name)}, cluster::node_role::worker, i);
    slot.place = place;
    if (auto r = launch(slot); !r) {
      if (launcher_->outage()) {  // submitted again when the controller answers (check_outage)
        spdlog::warn("cannot launch {} while the cluster manager does not answer: {}", name,
                     r.err().to_string());
        nodes_.erase(name);
        break;
      }
      fatal_ = "cannot launch " + name + ": " + r.err().to_string();
      return;
    }
  }
  // Shrink: the highest indices leave (SIGTERM: the node stops, its task goes back to TODO).
  for (auto it = nodes_.rbegin(); it != nodes_.rend() && running_workers() > kept; ++it) {
    auto& slot = it->second;
    if (slot.role != cluster::node_role::worker || !slot.wanted) continue;
    slot.wanted = false;
    if (slot.handle) (void)launcher_->signal(*slot.handle, SIGTERM);
    spdlog::info("scale: {} leaves", slot.id.to_string());
  }
  write_nodes_file();
}

void runner::handle_exits() {
  std::deque<std::pair<cluster::node_handle, cluster::exit_status>> exits;
  {
    std::lock_guard lk(mu_);
    exits.swap(exits_);
  }
  for (auto& [h, status] : exits) {
    auto it = nodes_.find(h.id.name);
    if (it == nodes_.end() || !it->second.handle || it->second.handle->serial != h.serial) continue;
    auto& slot = it->second;
    slot.handle.reset();
    slot.ended = slot.fenced ? "fenced: " + status.to_string() : status.to_string();
    if (finished_ || shutting_down_) continue;
    // Tell the master at once: faster than waiting for the connection to drop.
    if (slot.role != cluster::node_role::master && net_ && net_->connected("master")) {
      (void)net_->send("master", "master", wire::node_exited(h.id, status.to_string()), "runner");
    }
    if (!slot.wanted) {
      spdlog::info("{} {}", h.id.to_string(), status.to_string());
      if (slot.role == cluster::node_role::worker && running_workers() < workers_kept())
        scale_to(target_workers_);
      continue;
    }
    if (never_starts(slot, h, status)) return;
    auto now = clock_.now();
    // A preempted node did nothing wrong: it comes back when the cluster has room again.
    if (status.state != "PREEMPTED") slot.deaths.push_back(now);
    while (!slot.deaths.empty() && now - slot.deaths.front() > death_window) slot.deaths.pop_front();
    if (slot.deaths.size() > max_deaths) {
      const auto why = cluster::last_logged_error(status);
      fatal_ = h.id.name + " died " + std::to_string(slot.deaths.size()) +
               " times in a minute (last: " + status.to_string() + ")" +
               (why.empty() ? "" : "; its last error: " + why) + "; see " + dir_->log_path(h.id.name);
      write_nodes_file();
      return;
    }
    spdlog::warn("{} {}: relaunching", h.id.to_string(), status.to_string());
    slot.id.incarnation += 1;
    restarts_ += 1;
    timeline_.node_event(
        "replaced", slot.id.to_string(),
        "after " + status.to_string() + (slot.start_failures > 0 ? " before it joined" : ""));
    if (auto r = launch(slot); !r) fatal_ = "cannot relaunch " + h.id.name + ": " + r.err().to_string();
  }
  if (!exits.empty()) write_nodes_file();
}

bool runner::never_starts(node_slot& slot, const cluster::node_handle& h,
                          const cluster::exit_status& status) {
  if (slot.joined || !cluster::start_failure(status, h.id, slot.fenced)) {
    slot.start_failures = 0;
    return false;
  }
  ++slot.start_failures;
  cluster::start_failure_report r;
  r.id = h.id;
  r.status = status;
  r.backend = spec_.cluster.launcher;
  if (r.backend == "slurm") r.slurm_job = h.pid;
  r.host = status.trace.host.empty() ? h.host : status.trace.host;
  r.log_path = dir_->log_path(h.id.name);
  auto exe = cluster::self_exe();
  r.program = exe ? *exe : "troupe";
  r.times = slot.start_failures;
  auto what = cluster::describe(r);
  if (slot.start_failures < max_start_failures) {
    spdlog::warn("{} (the job fails after {} in a row)", what, max_start_failures);
    return false;
  }
  fatal_ = what;
  write_nodes_file();
  return true;
}

// The master declares a node dead when it misses heartbeats (a hung or SIGSTOPped process), and
// the runner sees it in the next status: the incarnation that master's membership listed alive
// is gone from it. Such a process may never exit by itself, so it is fenced (SIGKILL to its
// process group through the launcher) and its exit report relaunches it at once. A node not yet
// joined, one leaving on request and a new master's view that nodes have not rejoined yet are
// left alone.
void runner::fence_dead_nodes() {
  std::vector<cluster::member> members;
  {
    std::lock_guard lk(mu_);
    if (!status_.valid || finished_) return;
    members = status_.members;
  }
  auto find = [&](const std::string& name) {
    auto it = std::find_if(members.begin(), members.end(),
                           [&](const cluster::member& m) { return m.id.name == name; });
    return it == members.end() ? nullptr : &*it;
  };
  const auto* master = find("master");
  if (!master) return;
  const auto master_incarnation = master->id.incarnation;
  for (auto& [name, slot] : nodes_) {
    if (slot.role == cluster::node_role::master || !slot.handle || !slot.wanted || slot.fenced) continue;
    const auto* m = find(name);
    if (m && m->id == slot.id) {
      slot.joined = true;
      if (m->state == cluster::member_state::alive) slot.seen_by_master = master_incarnation;
      continue;
    }
    if (slot.seen_by_master != master_incarnation) continue;
    spdlog::warn("{} declared dead by the master: fencing it", slot.id.to_string());
    if (auto r = launcher_->fence(*slot.handle); !r) {
      spdlog::warn("fence {}: {}", slot.id.to_string(), r.err().to_string());
      continue;
    }
    slot.fenced = true;
    timeline_.node_event("fenced", slot.id.to_string(), "declared dead by the master");
  }
}

void runner::write_nodes_file() {
  if (!dir_) return;
  std::uint64_t epoch = 0;
  {
    std::lock_guard lk(mu_);
    epoch = status_.epoch;
  }
  std::vector<cluster::node_entry> entries;
  // A batch cluster's handle holds its job id, not a pid of this machine: nodes.json lists pid 0
  // and the job id as slurm_job then, so that nothing that signals pids can hit an unrelated
  // process (troupe chaos signals the Slurm job instead).
  bool local_pids = spec_.cluster.launcher == "local";
  for (const auto& [name, s] : nodes_) {
    cluster::node_entry e;
    e.id = s.id;
    e.role = s.role;
    e.handle = s.handle;
    if (e.handle && !local_pids) {
      e.slurm_job = e.handle->pid;
      e.handle->pid = 0;
    }
    e.leaving = !s.wanted;
    e.address = s.role == cluster::node_role::master ? master_addr_ : std::string();
    e.start_time = s.start_time;
    e.ended = s.ended;
    entries.push_back(std::move(e));
  }
  // `troupe status/scale/stop` talk to the runner: its address is the file's runner_address.
  auto f =
      cluster::make_nodes_file(dir_->job_id(), epoch, self_addr_, entries, troupe::clock::system().wall_ms());
  f.metrics_address = metrics_addr_;
  if (auto w = dir_->write_nodes(f); !w) spdlog::warn("{}", w.err().to_string());
}

}  // namespace troupe::control
