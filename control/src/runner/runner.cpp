#include "runner.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/collective/cleanup.hpp"

namespace troupe::control {

namespace {
volatile std::sig_atomic_t interrupted = 0;  // the signal that asked the runner to end
void on_signal(int sig) {
  interrupted = sig;
}
const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : "SIGINT";
}
}  // namespace

int runner::interrupted_by() {
  return interrupted;
}

int runner::run() {
  started_ = clock_.now();
  started_wall_ms_ = clock_.wall_ms();
  // Before setup: a signal while the data is prepared ends the job like one later does (the final
  // line, result.json, the timeline), not by killing the runner.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (int rc = setup(); rc != 0) return setup_ended(rc);
  spdlog::info("job {} in {} ({} workers, strategy {}{}), instance {}", dir_->job_id(), dir_->path(),
               target_workers_, spec_.job.strategy,
               spec_.uses_ps() ? ", " + std::to_string(spec_.ps.shards) + " PS shards" : "", instance_);
  timeline_.job_start(spec_.job.strategy, target_workers_, spec_.job.min_workers, spec_.job.max_workers,
                      spec_.nn.model.type);
  if (!start_master()) return finish(1);
  if (spec_.uses_ps())
    for (std::uint32_t i = 0; i < spec_.ps.shards; ++i) {
      auto name = cluster::node_name(cluster::node_role::ps, i);
      nodes_[name] = new_slot({name, first_incarnation(name)}, cluster::node_role::ps, i);
      if (auto r = launch(nodes_[name]); !r) {
        fatal_ = r.err().to_string();
        return finish(1);
      }
    }
  scale_to(target_workers_);
  write_nodes_file();
  return finish(loop());
}

int runner::setup_ended(int rc) {
  if (dir_ && lock_fd_ >= 0) {
    if (interrupted) {
      end_state_ = "interrupted";
      end_reason_ =
          std::string("interrupted by ") + signal_name(interrupted) + " during setup (" + setup_step_ + ")";
      spdlog::warn("{}", end_reason_);
    } else if (fatal_.empty()) {
      fatal_ = "setup failed (see logs/runner.log)";
    }
    rc = finish(rc);
  }
  if (prepare_running_ && *prepare_running_) {
    // The dataset import cannot be cancelled and must not run into the process's exit: the process
    // ends here. Its half-written stores are discarded and redone by the next preparer, its lock
    // goes with the process.
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return rc;
}

bool runner::start_master() {
  nodes_["master"] = new_slot({"master", first_incarnation("master")}, cluster::node_role::master, 0);
  if (auto r = launch(nodes_["master"]); !r) {
    fatal_ = r.err().to_string();
    return false;
  }
  keep_standby();  // loads while the master comes up
  // The master must be up before anyone joins it. A batch backend's master may wait in its queue
  // first (Slurm: PENDING until a preemption frees a CPU), for as long as the controller may be away.
  auto deadline =
      clock_.now() + (spec_.cluster.launcher == "local"
                          ? std::chrono::seconds(20)
                          : std::chrono::seconds(static_cast<long>(spec_.cluster.controller_timeout_s)));
  while (!net_->connected("master")) {
    if (clock_.now() > deadline) {
      fatal_ = "the master did not come up at " + master_addr_;
      return false;
    }
    handle_exits();
    if (!fatal_.empty()) return false;
    if (!net_->connect(master_addr_, true)) clock_.sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int runner::loop() {
  while (true) {
    handle_exits();
    {
      std::unique_lock lk(mu_);
      while (!scale_requests_.empty()) {
        auto n = scale_requests_.front();
        scale_requests_.pop_front();
        lk.unlock();
        scale_to(n);
        lk.lock();
      }
    }
    if (!fatal_.empty()) return 1;
    if (finished_) return result_ok_ ? 0 : 1;
    if (stop_) {
      end_state_ = "stopped";
      end_reason_ = "stopped on request (" + stop_reason_ + ")";
      return spdlog::warn("{}", end_reason_), 3;
    }
    if (interrupted) {  // 128 + the signal: 130 for SIGINT, 143 for SIGTERM
      end_state_ = "interrupted";
      end_reason_ = std::string("interrupted by ") + signal_name(interrupted);
      return spdlog::warn("{}", end_reason_), 128 + interrupted;
    }
    if (fatal_ = disk_fault_expired(); !fatal_.empty()) return spdlog::error("{}", fatal_), 1;
    if (fatal_ = check_outage(); !fatal_.empty()) return spdlog::error("{}", fatal_), 1;
    poll_status();
    watch_master();
    fence_dead_nodes();
    print_progress(false);
    wait_for_events();
  }
}

void runner::wait_for_events() {
  auto now = clock_.now();
  auto deadline = now + std::chrono::milliseconds(100);
  if (last_poll_) deadline = std::min(deadline, *last_poll_ + status_poll_interval);
  std::unique_lock lk(mu_);
  auto ready = [&] {
    return !exits_.empty() || !scale_requests_.empty() || finished_ || stop_ || interrupted;
  };
  // One real wait to the deadline (the runner runs on the system clock).
  (void)wait_until(clock_, wake_, lk, deadline, ready, std::max<troupe::clock::duration>(deadline - now, {}));
}

void runner::shutdown_nodes() {
  // With the cluster manager away, signals cannot reach the nodes: kill_all and
  // cancel_left_jobs wait for it instead.
  bool reachable = !launcher_->outage();
  for (auto& [name, slot] : nodes_) {
    slot.wanted = false;
    if (slot.handle && reachable) (void)launcher_->signal(*slot.handle, SIGTERM);
  }
  auto deadline = clock_.now() + std::chrono::seconds(5);
  for (auto& [name, slot] : nodes_)
    if (slot.handle && reachable) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_.now());
      (void)launcher_->wait(*slot.handle, std::max(left, std::chrono::milliseconds(1)));
    }
  if (reachable) launcher_->kill_all();
  cancel_left_jobs();  // the controller away: waits for it (kill_all included)
  // Every exit report has come (kill_all waits for them): record how each node ended.
  shutting_down_ = true;
  handle_exits();
  close_endpoint();
  write_nodes_file();
}

void runner::close_endpoint() {
  rpc_.reset();
  if (!net_) return;
  // The runner's handler (status, scale, stop) uses net_ on the io thread: the io thread drops the
  // name first, so that no handler can run while net_ is being destroyed (reset() nulls it first).
  auto dropped = std::make_shared<std::promise<void>>();
  net_->post([n = net_.get(), dropped] {
    n->unregister_name("runner");
    dropped->set_value();
  });
  if (dropped->get_future().wait_for(std::chrono::seconds(2)) != std::future_status::ready)
    spdlog::warn("the transport's io thread did not answer in 2 s; closing it anyway");
  net_.reset();
}

int launcher_exit_code(const error& e) {
  return e == cluster::cluster_errc::invalid_spec ? 2 : 1;
}

int run_job(const run_options& o) {
  runner r(o);
  return r.run();
}

}  // namespace troupe::control
