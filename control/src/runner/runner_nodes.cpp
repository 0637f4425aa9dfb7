#include <algorithm>
#include <csignal>
#include <set>

#include <spdlog/spdlog.h>

#include "runner.hpp"
#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::control {

namespace {
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
  node_slot placeholder;
  placeholder.id = {"worker-0", 0};
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

expected<cluster::node_spec> runner::spec_of(const node_slot& slot, bool spare) const {
  auto a = node_args_of(slot);
  if (auto ok = cluster::validate_node_args(a); !ok) return ok.err();
  auto ns = launch_spec_of(a, slot.role);
  ns.spare = spare;
  if (slot.role == cluster::node_role::worker) ns.host = slot.host;  // troupe scale --host: its first launch
  ns.avoid = cut_off_.at(clock_.now());
  return ns;
}

bool runner::master_up(const node_slot& master) const {
  return master.handle && (master.joined || (net_ && net_->connected("master")));
}

void runner::launched(node_slot& slot) {
  nodes_dirty_ = true;
  const auto& h = *slot.handle;
  // A batch backend's "pid" is its job id, not a process of this machine.
  auto st = spec_.cluster.launcher == "local" ? cluster::read_process_stat(h.pid) : std::nullopt;
  slot.start_time = st ? st->start_time : 0;
  if (slot.role == cluster::node_role::master) watch_.launched();
  slot.master_up_at_launch.reset();
  if (const auto* m = slots_.find("master"); m && m != &slot && master_up(*m))
    slot.master_up_at_launch = m->id.incarnation;
  // Slurm's handle is its job id ("pid" read as a process of this machine).
  // Where it runs, when the launcher chose a host ([cluster] hosts): a cut-off host's nodes are told
  // apart in the log.
  const std::string host = launcher_ ? launcher_->host_of(h) : h.host;
  const std::string what = (spec_.cluster.launcher == "slurm" ? "Slurm job " : "pid ") +
                           std::to_string(h.pid) + (host.empty() ? "" : " on host " + host);
  if (slot.role == cluster::node_role::worker)
    spdlog::info("launched {} ({}, slot {})", slot.id.to_string(), what, slot.place);
  else
    spdlog::info("launched {} ({})", slot.id.to_string(), what);
}

void runner::scale_to(std::uint32_t workers, const std::string& host) {
  auto r = slots_.scale_to(workers, host);
  if (!r.error.empty()) outcome_.fail(r.error);
  write_nodes_file();
}

void runner::on_exit(const node_exit_event& e) {
  const auto& [h, status] = e;
  auto v = slots_.on_exit(h, status, outcome_.finished() || shutting_down_ || !outcome_.fatal().empty());
  // Gone for good (reaped): what it left on this host goes now, not at the job's end (a stopped
  // worker the master fenced was still alive when the master forgot it, and its beacon stayed).
  if (h.host.empty() && dir_ && !instance_.empty())
    collective::remove_node_leftovers(collective::instance_key(dir_->job_id(), instance_), h.id.to_string());
  if (v.what == exit_verdict::kind::stale) return;
  if (v.what != exit_verdict::kind::recorded) {
    // Tell the master at once: faster than waiting for the connection to drop.
    if (v.slot->role != cluster::node_role::master && net_ && net_->connected("master"))
      (void)net_->send("master", "master", wire::node_exited(h.id, status.to_string()), "runner");
    if (v.what == exit_verdict::kind::left) {
      spdlog::info("{} {}", h.id.to_string(), status.to_string());
      if (v.slot->role == cluster::node_role::worker && slots_.running_workers() < slots_.workers_kept())
        scale_to(slots_.target());
    } else if (v.what == exit_verdict::kind::demoted) {
      spdlog::info("{} {}: relaunching as spare", h.id.to_string(), status.to_string());
    } else if (v.slot->role == cluster::node_role::worker && status.signal == 0 &&
               status.code == cluster::exit_no_worker_slot) {
      no_worker_slot(*v.slot);
    } else if (v.slot->role == cluster::node_role::worker && status.signal == 0 &&
               status.code == cluster::exit_model_refused) {
      const auto why = cluster::last_logged_error(status);
      outcome_.fail(h.id.name + ": the job's model failed as it started" + (why.empty() ? "" : ": " + why) +
                    " (every worker would; see " + dir_->log_path(h.id.name) + ")");
    } else {
      relaunch(*v.slot, h, status);
    }
  }
}

// A worker the master refused for want of a slot (nodes joined by hand hold slots up to max_workers):
// not relaunched into the same refusal, the job goes on with one worker fewer.
void runner::no_worker_slot(node_slot& slot) {
  slots_.retire_no_slot(slot);
  const auto why = "the master has no worker slot for it (max_workers " +
                   std::to_string(spec_.job.max_workers) + ", " + std::to_string(slots_.hand_workers()) +
                   " held by workers joined by hand): not relaunched; the runner keeps " +
                   std::to_string(slots_.target()) + " workers";
  spdlog::warn("{}: {}", slot.id.to_string(), why);
  timeline_.node_event("left", slot.id.to_string(), why);
  write_nodes_file();
}

// A wanted node died: relaunched after its backoff (relaunch_due), unless it never starts or keeps
// dying.
void runner::relaunch(node_slot& slot, const cluster::node_handle& h, const cluster::exit_status& status) {
  const auto start = never_starts(slot, h, status);
  if (start == start_end::gave_up) return;
  if (start == start_end::host_cut_off) {  // not the node's fault: no death counted, a slower retry
    slots_.retry_later(slot, cut_off_retry(slot.start_failures));
    timeline_.node_event("replaced", slot.id.to_string(),
                         "after " + status.to_string() + " before it joined (its host is cut off)");
    return;
  }
  auto v = slots_.died(slot, status);
  if (v.give_up) {
    const auto why = cluster::last_logged_error(status);
    // SIGBUS: a page of a mapped file that could not be had (a full /dev/shm or disk, a file cut).
    const std::string bus = status.signal == SIGBUS
                                ? " (a file it mapped could not give a page: is /dev/shm or "
                                  "the disk full?)"
                                : "";
    outcome_.fail(h.id.name + " died " + std::to_string(v.deaths) +
                  " times in a minute (last: " + status.to_string() + bus + ")" +
                  (why.empty() ? "" : "; its last error: " + why) + "; see " + dir_->log_path(h.id.name));
    return;
  }
  spdlog::warn("{} {}: relaunching", h.id.to_string(), status.to_string());
  timeline_.node_event("replaced", slot.id.to_string(),
                       "after " + status.to_string() + (slot.start_failures > 0 ? " before it joined" : ""));
}

void runner::relaunch_due() {
  for (auto& f : slots_.relaunch_due()) outcome_.fail("cannot relaunch " + f.name + ": " + f.why.to_string());
}

troupe::clock::duration runner::cut_off_retry(std::size_t failures) {
  auto d = std::chrono::duration_cast<troupe::clock::duration>(std::chrono::seconds(1));
  for (std::size_t i = 1; i < failures && d < std::chrono::seconds(30); ++i) d *= 2;
  return std::min<troupe::clock::duration>(d, std::chrono::seconds(30));
}

runner::start_end runner::never_starts(node_slot& slot, const cluster::node_handle& h,
                                       const cluster::exit_status& status) {
  if (slot.joined || !cluster::start_failure(status, h.id, slot.fenced)) {
    slot.start_failures = 0;
    return start_end::other;
  }
  // "Could not join" counts only when the master it dialled was up throughout: launched while the
  // master was down, restarting or pending, the node waited for the master, not for the network.
  const bool unreachable = cluster::could_not_join(status);
  if (unreachable) {
    const auto* m = slots_.find("master");
    if (!slot.master_up_at_launch || !m || !master_up(*m) || m->id.incarnation != *slot.master_up_at_launch)
      return start_end::other;
  }
  ++slot.start_failures;
  const auto r = failure_report(slot, h, status);
  const auto what = cluster::describe(r);
  // A worker that could not start on another host (it could not reach the master, or the host
  // command failed: ssh's 255 for a machine gone) while workers of other hosts have joined: the
  // host is cut off, not the job (a host's loss failed the whole elastic job within seconds, its
  // replacements sent back there). A PS shard keeps the rule below: the job cannot train without it.
  if (!r.host.empty() && slot.role == cluster::node_role::worker && joined_elsewhere(r.host)) {
    cut_off(r.host, "could not start a node (" + status.to_string() + ")");
    spdlog::warn(
        "{}; workers on other hosts reach the master and train on: it is launched again in {} s", what,
        std::chrono::duration_cast<std::chrono::seconds>(cut_off_retry(slot.start_failures)).count());
    return start_end::host_cut_off;
  }
  if (!r.host.empty()) cut_off(r.host, "could not start " + h.id.name + " (" + status.to_string() + ")");
  if (slot.start_failures < max_start_failures) {
    spdlog::warn("{} (the job fails after {} in a row)", what, max_start_failures);
    return start_end::other;
  }
  outcome_.fail(what);
  return start_end::gave_up;
}

cluster::start_failure_report runner::failure_report(const node_slot& slot, const cluster::node_handle& h,
                                                     const cluster::exit_status& status) const {
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
  return r;
}

void runner::cut_off(const std::string& host, const std::string& why) {
  if (spec_.cluster.launcher != "local") return;  // Slurm places its nodes itself (node_spec::avoid)
  if (cut_off_.cut(host, clock_.now()))
    spdlog::info("host {} {}: the job's next nodes go to other hosts where one has a free slot, for {} s",
                 host, why, cluster::cut_off_hosts::period_seconds());
}

bool runner::joined_elsewhere(const std::string& host) const {
  for (const auto& [name, s] : slots_.slots())
    if (s.role == cluster::node_role::worker && s.joined && s.handle &&
        (launcher_ ? launcher_->host_of(*s.handle) : s.handle->host) != host)
      return true;
  return false;
}

// The master declares a node dead when it misses heartbeats (a hung or SIGSTOPped process), and
// the runner sees it in the next status: the incarnation that master's membership listed alive
// is gone from it. Such a process may never exit by itself, so it is fenced (SIGKILL to its
// process group through the launcher) and its exit report relaunches it at once. A node not yet
// joined, one leaving on request and a new master's view that nodes have not rejoined yet are
// left alone.
void runner::fence_dead_nodes() {
  auto st = watch_.status();
  if (!st.valid || outcome_.finished()) return;
  auto master = std::find_if(st.members.begin(), st.members.end(),
                             [](const cluster::member& m) { return m.id.name == "master"; });
  if (master == st.members.end()) return;
  for (auto* slot : slots_.declared_dead(st.members, master->id.incarnation)) {
    spdlog::warn("{} declared dead by the master: fencing it{}", slot->id.to_string(),
                 launcher_ && launcher_->outage() ? " once the cluster manager answers again" : "");
    // Its host may be cut off (a partition): its replacement goes to another host with room first
    // (it went straight back to the freed slot there, and waited out a 30 s connect timeout).
    if (slot->handle && launcher_)
      if (const auto host = launcher_->host_of(*slot->handle); !host.empty() && joined_elsewhere(host))
        cut_off(host, "lost " + slot->id.to_string() + " (declared dead by the master)");
    if (auto r = slots_.fence(*slot); !r) {
      spdlog::warn("fence {}: {}", slot->id.to_string(), r.err().to_string());
      continue;
    }
    timeline_.node_event("fenced", slot->id.to_string(), "declared dead by the master");
  }
}

void runner::warn_waiting_nodes() {
  const auto now = clock_.now();
  std::map<std::string, std::pair<time_point, bool>> still;
  for (const auto& [name, why] : slots_.waiting()) {
    auto it = waiting_.find(name);
    auto entry = it == waiting_.end() ? std::pair{now, false} : it->second;
    if (!entry.second && now - entry.first >= std::chrono::seconds(10)) {
      entry.second = true;
      const bool control = name == "master" || name.rfind("ps-", 0) == 0;
      spdlog::warn("{} has waited 10 s in the cluster manager's queue: {}{}", name, why,
                   control ? "; the job cannot train without it (control nodes go to [cluster] control_host "
                             "and control_partition: are their CPUs held by another job?)"
                           : "");
      timeline_.node_event("waiting", name, why);
    }
    still.emplace(name, entry);
  }
  waiting_ = std::move(still);
}

// What `troupe status` answers with besides the master's status (master_watch::answer).
void runner::publish_status() {
  runner_fields f;
  f.job_id = dir_ ? dir_->job_id() : std::string();
  f.workers_target = slots_.target();
  f.workers_launched = slots_.launched_workers();
  f.restarts = slots_.restarts();
  f.hand_workers = slots_.hand_workers();
  f.max_launched = slots_.max_launched();
  f.finished = outcome_.finished();
  f.result_json = outcome_.master_result();
  watch_.publish(std::move(f));
}

void runner::refresh_nodes_file() {
  // A new epoch alone at most once a second (a burst of joins in a large job is many epochs).
  const bool epoch =
      watch_.status().epoch != nodes_epoch_ && clock_.now() - nodes_written_ >= std::chrono::seconds(1);
  if (nodes_dirty_ || epoch) write_nodes_file();
}

void runner::write_nodes_file() {
  if (!dir_) return;
  const std::uint64_t epoch = watch_.status().epoch;
  nodes_dirty_ = false;
  nodes_epoch_ = epoch;
  nodes_written_ = clock_.now();
  std::vector<cluster::node_entry> entries;
  // A batch cluster's handle holds its job id, not a pid of this machine: nodes.json lists pid 0
  // and the job id as slurm_job then, so that nothing that signals pids can hit an unrelated
  // process (troupe chaos signals the Slurm job instead).
  bool local_pids = spec_.cluster.launcher == "local";
  for (const auto& [name, s] : slots_.slots()) {
    cluster::node_entry e;
    e.id = s.id;
    e.role = s.role;
    e.handle = s.handle;
    // Where the backend placed it (Slurm: the node squeue lists it on), for `troupe status`'s HOST.
    if (e.handle && launcher_)
      if (auto where = launcher_->host_of(*e.handle); !where.empty()) e.handle->host = where;
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
  auto f = cluster::make_nodes_file(dir_->job_id(), epoch, self_addr_, entries, clock_.wall_ms());
  f.metrics_address = metrics_addr_;
  f.workers = slots_.target();
  if (auto w = dir_->write_nodes(f); !w) spdlog::warn("{}", w.err().to_string());
}

}  // namespace troupe::control
