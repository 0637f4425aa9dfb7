// The chaos loop: inject each fault when it is due, resume stopped nodes (those the runner has
// not fenced meanwhile), and poll the runner's status to see each fault detected and recovered
// from. Faults go to node pids from nodes.json (the nodes are the runner's children, started by
// its launcher, not this process's), or, for nodes that are Slurm jobs, through slurmctld
// (chaos_slurm.cpp).
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "chaos_observe.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/control/chaos.hpp"
#include "troupe/control/client.hpp"

namespace troupe::control {

namespace {

struct held_node {
  pid_t pid;
  long slurm_job;            // the node's Slurm job (pid 0), resumed through slurmctld
  std::uint64_t start_time;  // of the process (nodes.json): a reused pid is never resumed
  troupe::clock::time_point resume_at;
  std::size_t fault;  // its record in the report
};

bool role_matches(const cluster::node_record& n, const std::string& target) {
  if (n.id.name == target) return true;
  std::string role = target == "dispenser" ? "master" : target;
  return cluster::to_string(n.role) == role;
}

// The live node the fault hits: the named node, or a random one of the role (not one we hold).
std::optional<cluster::node_record> pick_target(const std::string& job_dir, const std::string& target,
                                                const std::vector<held_node>& held, std::mt19937_64& rng) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return std::nullopt;
  auto nodes = dir->read_nodes();
  if (!nodes) return std::nullopt;
  std::vector<cluster::node_record> c;
  for (const auto& n : nodes->nodes) {
    bool is_held = std::any_of(held.begin(), held.end(), [&](const held_node& h) {
      return h.pid == n.pid && h.slurm_job == n.slurm_job;
    });
    bool signalable = n.pid > 0 || n.slurm_job > 0;
    if (signalable && n.state != "exited" && !is_held && role_matches(n, target)) c.push_back(n);
  }
  if (c.empty()) return std::nullopt;
  return c[std::uniform_int_distribution<std::size_t>(0, c.size() - 1)(rng)];
}

// While its runner holds runner.lock; before it took it (the directory just created), while
// there is neither lock nor result.
bool default_running(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return false;
  if (dir->runner_pid()) return true;
  return !std::filesystem::exists(dir->lock_path()) && !std::filesystem::exists(dir->result_path());
}

void inject(fault_record& rec, std::size_t index, const cluster::node_record& n, const std::string& job_dir,
            std::vector<held_node>& held, troupe::clock& clk) {
  const auto& f = rec.spec;
  auto resume_at = clk.now() + std::chrono::milliseconds(static_cast<int>(f.hold_s * 1000));
  if (n.pid == 0 && f.kind != fault_kind::drop && f.kind != fault_kind::delay) {
    rec.note = slurm_fault(f, n, job_dir);
    if (f.kind == fault_kind::stop && rec.note.empty()) held.push_back({0, n.slurm_job, 0, resume_at, index});
    return;
  }
  switch (f.kind) {
    case fault_kind::kill:
      if (::kill(n.pid, SIGKILL) != 0) rec.note = "kill failed";
      break;
    case fault_kind::stop:
      if (::kill(n.pid, SIGSTOP) != 0)
        rec.note = "stop failed";
      else
        held.push_back({n.pid, 0, n.start_time, resume_at, index});
      break;
    case fault_kind::preempt:
      rec.note = "preempt: only nodes the Slurm launcher started";
      break;
    case fault_kind::partition:
    case fault_kind::throttle:
      rec.note = "a host fault";  // parse_fault refuses these for nodes
      break;
    case fault_kind::drop:
    case fault_kind::delay: {
      auto r = inject_messages(job_dir, n.id.name, f.drop_probability, f.delay_us,
                               static_cast<std::uint64_t>(f.hold_s * 1000));
      if (!r) rec.note = "inject failed: " + r.err().to_string();
      break;
    }
  }
}

// SIGCONT to the held processes that are due, and records when. A process already gone (the
// runner fenced it once the master declared it dead) is not resumed.
void resume_due(std::vector<held_node>& held, bool all, std::vector<fault_record>& recs, double now_s,
                const std::string& job_dir, troupe::clock::time_point now) {
  std::erase_if(held, [&](const held_node& h) {
    if (!all && h.resume_at > now) return false;
    if (h.slurm_job > 0) {  // a job already over (fenced) fails to be signalled: not resumed
      if (signal_slurm_node(job_dir, h.slurm_job, SIGCONT) && h.fault < recs.size())
        recs[h.fault].resumed_s = now_s - recs[h.fault].t_s;
      return true;
    }
    auto start = h.start_time ? std::optional<std::uint64_t>(h.start_time) : std::nullopt;
    if (cluster::process_alive(h.pid, start) && ::kill(h.pid, SIGCONT) == 0 && h.fault < recs.size())
      recs[h.fault].resumed_s = now_s - recs[h.fault].t_s;
    return true;
  });
}

// Injects one fault that is due: into a host, or a node picked for its target.
fault_record start_fault(const fault_spec& spec, double now, std::size_t index, const chaos_options& opt,
                         std::vector<held_node>& held, host_faults& hosts, observer& obs,
                         std::mt19937_64& rng) {
  fault_record rec;
  rec.spec = spec;
  rec.t_s = now;
  if (fault_host(rec.spec)) {
    if (auto n = hosts.pick(rec, rng)) {
      obs.before_fault(index, rec, *n);
      hosts.inject(rec, index);
      if (opt.verbose)
        spdlog::warn("chaos: {:.2f}s {} host {} ({} nodes) {}", now, to_string(rec.spec.kind), rec.host,
                     rec.nodes.size(), rec.note);
    }
  } else if (auto n = pick_target(opt.job_dir, rec.spec.target, held, rng); !n) {
    rec.note = "no live target";
  } else {
    rec.node = n->id.to_string();
    rec.pid = n->pid;
    rec.slurm_job = n->slurm_job;
    obs.before_fault(index, rec, *n);
    inject(rec, index, *n, opt.job_dir, held, opt.clock);
    if (opt.verbose)
      spdlog::warn("chaos: {:.2f}s {} {} ({} {})", now, to_string(rec.spec.kind), rec.node,
                   rec.pid ? "pid" : "Slurm job", rec.pid ? rec.pid : rec.slurm_job);
  }
  return rec;
}

// The faults the schedule did not reach: the job ended first.
void record_unreached(const std::vector<fault_spec>& faults, std::size_t next, chaos_report& rep) {
  for (std::size_t i = next; i < faults.size(); ++i) {
    fault_record rec;
    rec.spec = faults[i];
    rec.note = "job over before the fault was due";
    rep.faults.push_back(rec);
  }
}

}  // namespace

expected<chaos_report> run_chaos(const chaos_options& opt) {
  if (auto d = cluster::job_dir::open(opt.job_dir); !d) return d.err();
  std::function<bool()> running = opt.job_running;
  if (!running) running = [&] { return default_running(opt.job_dir); };
  auto faults = opt.faults;
  std::stable_sort(faults.begin(), faults.end(),
                   [](const auto& a, const auto& b) { return a.at_s < b.at_s; });
  chaos_report rep;
  rep.job_dir = opt.job_dir;
  std::mt19937_64 rng(faults.size() * 7919 + 17);
  std::vector<held_node> held;
  troupe::clock& clk = opt.clock;
  host_faults hosts(opt.job_dir, clk);
  observer obs(opt.job_dir, clk);
  const auto start = clk.now();
  auto since = [&] { return std::chrono::duration<double>(clk.now() - start).count(); };
  std::size_t next = 0;
  double last_fault_t = 0;
  while (running()) {
    double now = since();
    for (; next < faults.size() && faults[next].at_s <= now; ++next) {
      rep.faults.push_back(start_fault(faults[next], now, rep.faults.size(), opt, held, hosts, obs, rng));
      last_fault_t = now;
    }
    resume_due(held, false, rep.faults, since(), opt.job_dir, clk.now());
    hosts.undo_due(false, rep.faults);
    obs.poll(rep.faults);
    if (next == faults.size() && held.empty() && !hosts.holding() &&
        (obs.all_resolved(rep.faults) || now - last_fault_t > opt.settle_s))
      break;
    // The job is other processes (the runner, its nodes): their state is polled through files and
    // status requests, with no event of theirs to wait on here; 50 ms bounds the lag of a fault.
    clk.sleep_for(std::chrono::milliseconds(50));
  }
  resume_due(held, true, rep.faults, since(), opt.job_dir, clk.now());
  hosts.undo_due(true, rep.faults);
  obs.close(rep.faults);
  record_unreached(faults, next, rep);
  return rep;
}

}  // namespace troupe::control
