#include "runner.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <variant>

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
  return sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP (its terminal closed)" : "SIGINT";
}
}  // namespace

int runner::interrupted_by() {
  return interrupted;
}

// The master's hang limit: the transport closes a connection silent for heartbeat_timeout; three of
// them without a status answer is a hang, not a slow tick.
watch_limits runner_watch_limits(const job::job_spec& spec) {
  watch_limits l;
  l.hang_limit =
      std::max<troupe::clock::duration>(std::chrono::seconds(3), 3 * spec.transport.heartbeat_timeout);
  return l;
}

slot_policy runner_slot_policy(const job::job_spec& spec) {
  slot_policy p;
  p.min_workers = spec.job.min_workers;
  p.max_workers = spec.job.max_workers;
  p.spare_mode = spec.cluster.launcher == "slurm" && !spec.cluster.spare_partition.empty();
  return p;
}

runner::runner(run_options o, troupe::clock& clk)
    : opt_(std::move(o)), clock_(clk), events_(clk), slots_(clk, {}), watch_(clk, {}), outcome_(clk) {}

int runner::run() {
  outcome_.start();
  // Before setup: a signal while the data is prepared ends the job like one later does (the final
  // line, result.json, the timeline), not by killing the runner.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);  // the terminal closed: the job ends as on SIGTERM, its story written
  // Its output piped to a reader that left (`troupe run job.toml | head`): the job goes on, unread,
  // to its end and result.json (SIGPIPE killed the runner, exit 141, the job "dead"). Nodes start
  // with every signal as by default (local/spawn.cpp), tools too (run_tool.cpp).
  std::signal(SIGPIPE, SIG_IGN);
  if (int rc = setup(); rc != 0) return setup_ended(rc);
  spdlog::info("job {} in {} ({} workers, strategy {}{}), instance {}", dir_->job_id(), dir_->path(),
               slots_.target(), spec_.job.strategy,
               spec_.uses_ps() ? ", " + std::to_string(spec_.ps.shards) +
                                     (spec_.ps.shards == 1 ? " PS shard" : " PS shards")
                               : "",
               instance_);
  timeline_.job_start(spec_.job.strategy, slots_.target(), spec_.job.min_workers, spec_.job.max_workers,
                      spec_.nn.model.type, resumed_from_);
  if (init_loaded_) timeline_.model_init(spec_.nn.model.init, init_loaded_->first, init_loaded_->second);
  beat_ = std::make_unique<runner_beat>(cluster::runner_beat_path(dir_->path()), clock_);
  if (!start_master()) return finish(1);
  if (spec_.uses_ps())
    for (std::uint32_t i = 0; i < spec_.ps.shards; ++i)
      if (auto r = slots_.start(cluster::node_role::ps, i); !r) {
        outcome_.fail(r.err().to_string());
        return finish(1);
      }
  nodes_started_ = true;
  scale_to(slots_.target(), spec_.cluster.worker_host);
  write_nodes_file();
  return finish(loop());
}

int runner::setup_ended(int rc) {
  // A --resume that ended in its setup before it began (refused: its job.toml no longer fits;
  // interrupted) ran nothing of the job: its record (result.json, the timeline's end) stays as the run it
  // resumes left it (an interrupted job read "failed" after a refused resume, its counts gone).
  keep_record_ = !opt_.resume.empty() && !resume_begun_;
  say_setup_warnings();  // refused before logs/runner.log opened: said all the same
  if (dir_ && lock_fd_ >= 0) {
    if (interrupted) {
      outcome_.end("interrupted", std::string("interrupted by ") + signal_name(interrupted) +
                                      " during setup (" + setup_step_ + ")");
      spdlog::warn("{}", outcome_.reason());
    } else if (outcome_.stop_pending()) {
      outcome_.end("stopped", "stopped on request (" + outcome_.stop_reason() + ")");
      spdlog::warn("{}", outcome_.reason());
    } else {
      outcome_.fail("setup failed (see logs/runner.log)");
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
  if (auto r = slots_.start(cluster::node_role::master, 0); !r) {
    outcome_.fail(r.err().to_string());
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
      outcome_.fail("the master did not come up at " + master_addr_);
      return false;
    }
    drain_events();
    if (!outcome_.fatal().empty()) return false;
    relaunch_due();
    // The master's listening socket is another process's state, with no event to wait on: a failed
    // dial is retried after 20 ms, or at once when an event (the master's exit) comes.
    if (!net_->connect(master_addr_, true))
      (void)events_.wait_until(clock_.now() + std::chrono::milliseconds(20), std::chrono::milliseconds(20));
  }
  return true;
}

int runner::loop() {
  while (true) {
    drain_events();
    relaunch_due();
    if (int rc = end_code(); rc >= 0) return rc;
    poll_status();
    watch_master();
    fence_dead_nodes();
    warn_waiting_nodes();
    refresh_nodes_file();
    publish_status();
    print_progress(false);
    wait_for_events();
  }
}

int runner::end_code() {
  if (!outcome_.fatal().empty()) return 1;
  if (outcome_.finished()) return outcome_.master_ok() ? 0 : 1;
  if (outcome_.stop_pending()) {
    outcome_.end("stopped", "stopped on request (" + outcome_.stop_reason() + ")");
    return spdlog::warn("{}", outcome_.reason()), 3;
  }
  if (interrupted) {  // 128 + the signal: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP
    outcome_.end("interrupted", std::string("interrupted by ") + signal_name(interrupted));
    return spdlog::warn("{}", outcome_.reason()), 128 + interrupted;
  }
  auto why = disk_fault_expired();
  if (why.empty()) why = check_outage();
  if (why.empty()) why = job_dir_gone();
  if (why.empty()) return -1;
  spdlog::error("{}", why);
  outcome_.fail(std::move(why));
  return 1;
}

void runner::wait_for_events() {
  const auto now = clock_.now();
  auto deadline = now + std::chrono::milliseconds(100);
  // A poll overdue is one the master could not take (not connected): the 100 ms bound, no spin.
  if (auto p = watch_.next_poll(); p && *p > now) deadline = std::min(deadline, *p);
  if (auto r = slots_.next_relaunch()) deadline = std::min(deadline, std::max(*r, now));
  // One real wait to the deadline (the runner runs on the system clock).
  (void)events_.wait_until(deadline, deadline - now);
}

void runner::drain_events() {
  bool exits = false;
  for (auto& e : events_.drain()) {
    if (auto* x = std::get_if<node_exit_event>(&e)) {
      on_exit(*x);
      exits = true;
    } else if (auto* s = std::get_if<scale_event>(&e)) {
      timeline_.scale(s->workers, s->requested);
      if (!shutting_down_) on_scale(s->workers, s->host);
    } else if (auto* f = std::get_if<finished_event>(&e)) {
      on_master_finished(*f);
    } else if (auto* st = std::get_if<stop_event>(&e)) {
      outcome_.stop_requested(std::move(st->reason));
    }
  }
  if (exits) write_nodes_file();
}

// The job's end as its master reports it. Anyone holding the job's token can send the message: one
// from another node (a forged one ended a half-trained job as finished, and it could not be resumed),
// or with a result that is not a JSON object, is ignored.
void runner::on_master_finished(finished_event& f) {
  const auto* master = slots_.find("master");
  if (!master || f.from != master->id) {
    spdlog::warn("ignored a job-finished message from {}: only the job's master ({}) ends it",
                 f.from.to_string(), master ? master->id.to_string() : "none yet");
    return;
  }
  if (!result_is_object(f.result_json)) {
    spdlog::warn("ignored a job-finished message from {}: its result is not a JSON object",
                 f.from.to_string());
    return;
  }
  outcome_.master_finished(std::move(f.result_json), f.ok);
}

void runner::on_scale(std::uint32_t workers, const std::string& host) {
  if (nodes_started_)
    scale_to(workers, host);
  else
    slots_.set_target(workers, host);  // run() launches the target once the master is up
}

void runner::shutdown_nodes() {
  // With the cluster manager away, signals cannot reach the nodes: kill_all and
  // cancel_left_jobs wait for it instead.
  bool reachable = !launcher_->outage();
  // The workers first: each hands back the task it trains with the rows it trained, and settles its
  // pushes, while the master and the PS shards still run (docs/job.md, "A leaving worker's task");
  // then the rest.
  auto wait_for = [&](bool workers, std::chrono::seconds most) {
    auto deadline = clock_.now() + most;
    for (const auto& [name, slot] : slots_.slots())
      if (slot.handle && reachable && (slot.role == cluster::node_role::worker) == workers) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_.now());
        (void)launcher_->wait(*slot.handle, std::max(left, std::chrono::milliseconds(1)));
      }
  };
  slots_.stop_all(reachable ? SIGTERM : 0, slot_table::roles::workers);
  wait_for(true, std::chrono::seconds(5));
  slots_.stop_all(reachable ? SIGTERM : 0, slot_table::roles::others);
  wait_for(false, std::chrono::seconds(5));
  if (reachable) launcher_->kill_all();
  cancel_left_jobs();  // the controller away: waits for it (kill_all included)
  // Every exit report has come (kill_all waits for them): record how each node ended.
  shutting_down_ = true;
  drain_events();
  release_leases();
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

// The job directory removed while the job runs (rm -rf, a cleanup): nothing can be written any more
// (it paused on its counters' file, then failed 60 s later relaunching a master whose log had no
// directory): it ends at once, naming it. Looked at once a second.
std::string runner::job_dir_gone() {
  const auto now = clock_.now();
  if (now - dir_checked_ < std::chrono::seconds(1)) return {};
  dir_checked_ = now;
  std::error_code ec;
  if (std::filesystem::exists(dir_->job_toml_path(), ec) || ec) return {};
  return "the job directory " + dir_->path() +
         " was removed while the job ran: its journal, checkpoints and "
         "logs are gone";
}

int launcher_exit_code(const error& e) {
  return e == cluster::cluster_errc::invalid_spec ? 2 : 1;
}

int run_job(const run_options& o) {
  runner r(o);
  return r.run();
}

}  // namespace troupe::control
