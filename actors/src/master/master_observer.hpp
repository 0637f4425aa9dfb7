// What the master tells people and machines about its job (docs/observe.md): membership changes
// and a metrics event once a second in the job's timeline (<job dir>/events.jsonl), and the same
// figures as Prometheus metrics on /metrics ([cluster] metrics_host / metrics_port, pinned by the
// runner in job.toml so a restarted master serves the same address).
//
// A departure is written once its cause is known: the runner's exit report (exit code, signal,
// Slurm's PREEMPTED) arrives after the connection drop, so gone() waits up to 2 s for
// exit_reported() before writing "died" with the transport's reason. Kinds: "leave" (exited with
// code 0: scale-down, a clean stop; or gone after the job finished), "preempted" (the launcher says
// so), "died" (anything else).
//
// Every interval here (the wait for a cause, the step time, the recovery time, the second between
// metrics events) is measured on the clock it is given: the node's (node_context::clock()).
//
// Threads: the master actor calls everything; /metrics is served from the HTTP server's thread
// (the registry is thread-safe). Nothing here throws for I/O or fails the master: a port that
// cannot be bound is logged and the job goes on without /metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batch_choices.hpp"
#include "job_progress.hpp"
#include "troupe/cluster/membership.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/observe/http_server.hpp"
#include "troupe/observe/metrics.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/transport/message.hpp"
#include "troupe/wire/goodput_report.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {

class master_observer {
 public:
  // `address`: the master's own ("host:port"), whose host serves /metrics when [cluster]
  // metrics_host is empty.
  master_observer(const job::job_spec& spec, const std::string& job_dir, const std::string& job_id,
                  const std::string& address, troupe::clock& clk);
  ~master_observer();

  void joined(const cluster::member& m, const cluster::membership_view& view);
  void gone(const node_id& id, bool worker, const std::string& reason, std::uint64_t epoch);
  // The runner's word on how a node's process ended (cluster::exit_status::to_string()).
  void exit_reported(const node_id& id, const std::string& status);
  void progress(const node_id& from, std::uint64_t samples, std::uint64_t steps);
  // The ring's rank 0 reported its goodput (docs/goodput.md): gauges, and a "batch" event for a new
  // batch choice, a "batch_measured" event once its goodput was measured (once each per choice, in
  // the timeline across masters and runs: batch_choices.hpp).
  void goodput(const wire::goodput_report& g);
  // The job finished: the runner now stops every node at once and sends no exit reports, so a
  // departure from here on is a node leaving a finished job ("leave"), whatever its connection said.
  void job_finished() { job_finished_ = true; }
  // The master's own incarnation: its relaunches, which the view (of the other nodes) leaves out and
  // the timeline's and /metrics' restarts counted short of result.json's node_restarts.
  void set_own_restarts(std::uint64_t n) { own_restarts_ = n; }
  // Not the job's first master (counters.json says another started before): its metrics events wait
  // for the dispenser's counts (its first read as every task count back to 0).
  void set_relaunched(bool r) { relaunched_ = r; }
  bool waits_for_counts(const std::optional<wire::task_counts>& counts) const {
    return relaunched_ && !counts;
  }
  // Whether the next tick writes a metrics event: at observe::metrics_pace (each second for this
  // master's first ten minutes, then every 5 s), after a second when the alive workers in `view`
  // are not those of the last event, and at the first tick after the job finished (its last
  // figures: the master's finish writes them at once, with a tick of its own). The master saves its counters
  // first, so a restarted master never reports fewer samples than the timeline did.
  bool metrics_due(const cluster::membership_view& view) const;
  // Every master tick: departures whose cause did not come, gauges each second, a metrics event
  // when `event` (metrics_due, asked once a tick: the counters were saved by the same answer).
  // `goodput`: rank 0's latest report (docs/goodput.md), in the metrics event when valid.
  void tick(const cluster::membership_view& view, const job_progress& progress,
            const std::optional<wire::task_counts>& counts, const wire::goodput_report& goodput, bool event);

  // "host:port" of /metrics, empty when not served.
  std::string metrics_address() const;

 private:
  struct departure {
    std::string node, reason;
    bool worker = false;
    bool after_finish = false;  // gone once the job had finished
    std::uint64_t epoch = 0, t_ms = 0;
    troupe::clock::time_point seen;
  };
  void write_departure(const departure& d, const std::string& kind);
  void write_choice(const wire::goodput_report& g);  // the report's latest batch choice, if new
  std::string kind_of(const departure& d) const;     // "leave", "preempted" or "died"
  void start_metrics(const job::job_spec& spec, const std::string& job_dir, const std::string& own_host);
  void update_metrics(const cluster::membership_view& view, const job_progress& progress,
                      const std::optional<wire::task_counts>& counts, std::uint64_t restarts);

  troupe::clock& clock_;
  troupe::clock::time_point started_;
  observe::job_timeline timeline_;
  observe::registry metrics_;
  observe::labels labels_;
  std::unique_ptr<observe::http_server> server_;
  std::vector<departure> pending_;
  std::map<std::string, troupe::clock::time_point> last_progress_;
  std::optional<troupe::clock::time_point> recovering_since_;
  std::size_t recovery_target_ = 0;
  std::size_t workers_alive_ = 0;
  std::uint64_t own_restarts_ = 0;
  bool relaunched_ = false;
  bool job_finished_ = false;
  std::optional<troupe::clock::time_point> last_event_;  // none yet: the first tick writes one
  std::optional<troupe::clock::time_point> last_gauges_;
  std::size_t workers_written_ = 0;  // the alive workers of the last metrics event
  bool final_written_ = false;       // a metrics event written since the job finished
  batch_choices choices_;            // the batch choices in the timeline, this run's and earlier ones'
  std::uint64_t last_samples_ = 0, last_done_ = 0, last_requeued_ = 0, last_failed_ = 0, last_restarts_ = 0;
};

}  // namespace troupe::actors
