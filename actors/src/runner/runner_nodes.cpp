#include <csignal>

#include <spdlog/spdlog.h>

#include "../wire.hpp"
#include "runner.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::actors {

namespace {
// A node that dies this often this fast is broken, not unlucky: the job fails rather than spin.
constexpr std::size_t max_deaths = 10;
constexpr auto death_window = std::chrono::seconds(60);
}  // namespace

expected<void> runner::launch(node_slot& slot) {
  cluster::node_spec ns;
  ns.id = slot.id;
  ns.argv = {"troupe", "node", "--job-dir", dir_->path(), "--role", std::string(cluster::to_string(slot.role)),
             "--index", std::to_string(slot.index), "--incarnation", std::to_string(slot.id.incarnation),
             "--train", data_.train_dir, "--test", data_.test_dir};
  if (slot.role == cluster::node_role::master) {
    ns.argv.insert(ns.argv.end(), {"--listen", master_addr_});
  } else {
    ns.argv.insert(ns.argv.end(), {"--join", master_addr_});
  }
  ns.log_file = dir_->log_path(slot.id.name);
  // Nodes share the machine: one BLAS thread each, the job's processes are the parallelism.
  ns.env = {{"OPENBLAS_NUM_THREADS", "1"}};
  auto h = launcher_->launch(ns);
  if (!h) return h.err();
  slot.handle = *h;
  spdlog::debug("launched {} (pid {})", slot.id.to_string(), h->pid);
  return {};
}

std::uint32_t runner::running_workers() const {
  std::uint32_t n = 0;
  for (const auto& [name, s] : nodes_)
    if (s.role == cluster::node_role::worker && s.wanted) ++n;
  return n;
}

void runner::scale_to(std::uint32_t workers) {
  workers = std::clamp(workers, spec_.job.min_workers, spec_.job.max_workers);
  {
    std::lock_guard lk(mu_);
    target_workers_ = workers;
  }
  // Grow: the lowest free worker indices.
  for (std::size_t i = 0; running_workers() < workers; ++i) {
    auto name = cluster::node_name(cluster::node_role::worker, i);
    auto it = nodes_.find(name);
    if (it != nodes_.end() && it->second.wanted) continue;
    if (it == nodes_.end()) it = nodes_.emplace(name, new_slot({name, 0}, cluster::node_role::worker, i)).first;
    auto& slot = it->second;
    slot.wanted = true;
    if (slot.handle) continue;  // still shutting down from an earlier scale-down: relaunched when it exits
    if (auto r = launch(slot); !r) {
      fatal_ = "cannot launch " + name + ": " + r.err().to_string();
      return;
    }
  }
  // Shrink: the highest indices leave (SIGTERM: the node stops, its task goes back to TODO).
  for (auto it = nodes_.rbegin(); it != nodes_.rend() && running_workers() > workers; ++it) {
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
    if (finished_) continue;
    // Tell the master at once: faster than waiting for the connection to drop.
    if (slot.role != cluster::node_role::master && net_ && net_->connected("master")) {
      auto o = wire::job();
      auto n = o.body.initNodeExited();
      wire::write_node(n.initNode(), h.id);
      n.setStatus(status.to_string());
      (void)net_->send("master", "master", std::move(o.out), "runner");
    }
    if (!slot.wanted) {
      spdlog::info("{} {}", h.id.to_string(), status.to_string());
      if (slot.role == cluster::node_role::worker && running_workers() < target_workers_) scale_to(target_workers_);
      continue;
    }
    auto now = steady::now();
    slot.deaths.push_back(now);
    while (!slot.deaths.empty() && now - slot.deaths.front() > death_window) slot.deaths.pop_front();
    if (slot.deaths.size() > max_deaths) {
      fatal_ = h.id.name + " died " + std::to_string(slot.deaths.size()) + " times in a minute (last: " +
               status.to_string() + "); see " + dir_->log_path(h.id.name);
      return;
    }
    spdlog::warn("{} {}: relaunching", h.id.to_string(), status.to_string());
    slot.id.incarnation += 1;
    restarts_ += 1;
    if (auto r = launch(slot); !r) fatal_ = "cannot relaunch " + h.id.name + ": " + r.err().to_string();
  }
  if (!exits.empty()) write_nodes_file();
}

void runner::write_nodes_file() {
  if (!dir_) return;
  cluster::nodes_file f;
  f.job_id = dir_->job_id();
  {
    std::lock_guard lk(mu_);
    f.epoch = status_.epoch;
  }
  f.updated_ms = troupe::clock::system().wall_ms();
  f.master_address = self_addr_;  // `troupe status/scale/stop` talk to the runner
  for (const auto& [name, s] : nodes_) {
    cluster::node_record r;
    r.id = s.id;
    r.role = s.role;
    r.pid = s.handle ? s.handle->pid : 0;
    r.address = s.role == cluster::node_role::master ? master_addr_ : "";
    r.state = s.handle ? (s.wanted ? "running" : "leaving") : "exited";
    f.nodes.push_back(r);
  }
  if (auto w = dir_->write_nodes(f); !w) spdlog::warn("{}", w.err().to_string());
}

}  // namespace troupe::actors
