// The job runner: it composes its parts and runs the loop that drives them.
//   slot_table.hpp     the node slots: launch, relaunch after a backoff, fence, scale
//   master_watch.hpp   the master's status polls and hang watch, and the status answers
//   job_outcome.hpp    how the job ended: result.json and the final line
//   runner_events.hpp  the queue the launcher's and the transport's threads push into; only the
//                      loop drains it, so the runner's state has one thread
// Its steps: runner.cpp (the loop), runner_setup.cpp and runner_job_dir.cpp (the configuration,
// the job directory, new or resumed, and what a dead runner left there), runner_nodes.cpp (what a
// node is launched with, exits, fencing), runner_watch.cpp (the master's hang watch), runner_io.cpp
// (messages and the progress line), runner_result.cpp (the end). Nodes are started, signalled and
// fenced only through the cluster::launcher interface, made by cluster::make_launcher from the
// job's [cluster] section. Every deadline and interval of the runner, its parts, its rpc client's
// and its launcher's read one clock, the runner's (tests: a manual one).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/cut_off_hosts.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/cluster/start_failure.hpp"
#include "troupe/control/runner.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/rpc.hpp"
#include "troupe/wire/status_codec.hpp"

#include "job_outcome.hpp"
#include "master_watch.hpp"
#include "runner_beat.hpp"
#include "runner_events.hpp"
#include "slot_table.hpp"

namespace troupe::storage {
class task_journal;
}

namespace troupe::control {

using job::job_spec;
using job::prepared_data;
using wire::job_status;
using wire::read_job_status;
using wire::rpc_client;
using wire::write_job_status;

// The exit code for a launcher that cannot start: 2 when the job file asks for what the backend
// does not have (an unknown partition), 1 when the backend itself fails (sbatch missing, the
// controller down).
int launcher_exit_code(const error& e);
// `bytes` random bytes in hex (job tokens, instance ids).
std::string random_hex(std::size_t bytes);
// `path` absolute and normal (relative to the working directory), as it was when that fails: the
// nodes run where their host command puts them (runner_setup.cpp).
void make_absolute(std::string& path);
// What the launcher knows of the job: a batch backend records the jobs it submits in the job dir.
cluster::launch_site launch_site_of(const cluster::job_dir& dir);

// The runner's parts as the job's file sets them: the master's hang limit, the workers' bounds.
watch_limits runner_watch_limits(const job::job_spec& spec);
slot_policy runner_slot_policy(const job::job_spec& spec);

// Whether the result.json at `path` says the job finished (no file, or another status: not).
bool finished_job(const std::string& path);

// A refusal before the job has a directory (a bad job file, flag or --resume): the CLI's one
// "troupe: error: ..." line on stderr, as every other command says it (it was a log line). `rc`.
int usage_refusal(const std::string& text, int rc = 2);

class runner {
 public:
  explicit runner(run_options o, troupe::clock& clk = troupe::clock::system());
  ~runner();
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;
  int run();

 private:
  using time_point = troupe::clock::time_point;
  // setup (runner_setup.cpp)
  int setup();
  int write_token(std::string& token);
  int start_transport(const std::string& token);
  int start_launcher();
  // The datasets (prepare_datasets) on a thread of their own, waited for until done or a stop
  // signal (then 128 + the signal, the import left running: run() ends the process).
  int prepare_data();
  int check_journal_matches();
  int refuse(const std::string& why);
  bool stop_asked_in_setup();
  int check_resumed_state(const nn::dataset_info& info);
  // The stop signal the runner got (SIGINT, SIGTERM), 0 while none.
  static int interrupted_by();
  int check_model();
  int read_config(config_doc& doc);
  int apply_spec(config_doc& doc);
  // the job directory (runner_job_dir.cpp)
  int open_job_dir(const config_doc& doc);
  int open_resumed_dir();
  int create_job_dir(const config_doc& doc);
  int dir_refusal(const error& err, const std::string& path);
  expected<config_doc> stored_copy(const config_doc& doc) const;
  int lock_job_dir();
  void clean_dead_runner(const cluster::job_dir& dir);
  // A resumed job's journal: quarantined tasks get their attempts anew, and a ring job without a
  // ring checkpoint trains its DONE tasks again (their updates were lost with the replicas); with
  // one, the tasks whose rows were applied after its step (reopen_after_checkpoint).
  int reopen_tasks();
  int reopen_after_checkpoint(storage::task_journal& journal);
  // A --resume past its checks: the job's old result.json goes (this run writes its own) and its
  // journal is reopened (reopen_tasks). Nothing of the job is changed before (a refused resume).
  int begin_resumed_run();
  void start_log();
  // A failed setup(): the job's end recorded when it has a directory of its own.
  int setup_ended(int rc);
  // the loop (runner.cpp)
  // Launches the master and waits until it answers; false (the outcome failed) when it does not.
  bool start_master();
  int loop();
  // The exit code once the job is to end (finished, failed, stopped, interrupted), else -1.
  int end_code();
  // Waits until an event is queued, a relaunch or the next status poll is due, or 100 ms have
  // passed (the bound on noticing a signal: its handler cannot notify).
  void wait_for_events();
  // Applies every queued event in order (exits, scale and stop requests, the master's result).
  void drain_events();
  void on_exit(const node_exit_event& e);
  void on_scale(std::uint32_t workers, const std::string& host);
  void no_worker_slot(node_slot& slot);
  void on_master_finished(finished_event& f);
  std::string ended_as() const;
  void shutdown_nodes();
  // Once every node has reported its exit: the leases they held go back to TODO, so the ended job's
  // journal, result.json and `troupe status` show no task in progress (runner_result.cpp).
  void release_leases();
  // Drops the runner's name on the io thread, then closes the transport (rpc_ first).
  void close_endpoint();
  int finish(int rc);
  int setup_failed(const error& e, int rc);
  // nodes (runner_nodes.cpp)
  // The `troupe node` arguments and launch spec of a node in `slot`.
  cluster::node_args node_args_of(const node_slot& slot) const;
  cluster::node_spec launch_spec_of(const cluster::node_args& a, cluster::node_role role) const;
  expected<cluster::node_spec> spec_of(const node_slot& slot, bool spare) const;
  void launched(node_slot& slot);
  // A TorchScript job on this machine alone keeps a standby worker (docs/models.md).
  void keep_standby();
  void relaunch(node_slot& slot, const cluster::node_handle& h, const cluster::exit_status& status);
  void relaunch_due();
  // The master slot runs and has answered (or the runner holds a connection to it).
  bool master_up(const node_slot& master) const;
  // Counts an end before the node joined; true (the outcome failed) once it never starts, it seems.
  // How a wanted node's end before it joined counts: `gave_up` (the job failed: it never starts),
  // `host_cut_off` (it could not reach the master from a host while workers elsewhere train: tried
  // again after cut_off_retry, no death counted), `other` (a death like any).
  enum class start_end { other, host_cut_off, gave_up };
  start_end never_starts(node_slot& slot, const cluster::node_handle& h, const cluster::exit_status& status);
  // 1 s, doubling per end in a row, at most 30 s.
  static troupe::clock::duration cut_off_retry(std::size_t failures);
  cluster::start_failure_report failure_report(const node_slot& slot, const cluster::node_handle& h,
                                               const cluster::exit_status& status) const;
  // A node on `host` could not start there or was lost (`why`, logged): the next launches keep off
  // it for cluster::cut_off_hosts::period (node_spec::avoid) while another host has room.
  void cut_off(const std::string& host, const std::string& why);
  // A worker that joined runs on a host other than `host` ("": this machine).
  bool joined_elsewhere(const std::string& host) const;
  void fence_dead_nodes();
  // Nodes waiting in the cluster manager's queue: a warning once one has waited 10 s, naming Slurm's
  // reason (two jobs' control nodes on one control_host waited for each other, nothing said).
  void warn_waiting_nodes();
  void watch_master();
  void scale_to(std::uint32_t workers, const std::string& host = "");
  void publish_status();
  void write_nodes_file();
  // nodes.json again when what it says moved on: a node relaunched (its new incarnation, pid and
  // host; it said the dead one's until the next exit), or the membership epoch changed.
  void refresh_nodes_file();
  // io (runner_io.cpp): on_message runs on the transport's io thread and only pushes events and
  // answers from what the loop published.
  void on_message(const message& m);
  void reply_scale(const message& m, std::uint32_t asked, std::string host);
  void reply_stop(const message& m, std::string reason);
  void poll_status(bool force = false);
  void print_progress(bool final_line);
  std::string progress_notes(const status_snapshot& s) const;
  std::string pause_notes(const status_snapshot& s) const;
  std::pair<double, std::string> shown_pace(const status_snapshot& s, double secs, bool final_line) const;
  void answer_status(const std::string& node, const std::string& to, std::uint64_t id);
  // results (runner_result.cpp)
  // Non-empty (the reason) once a disk fault the master reports has lasted job.disk_full_timeout_ms.
  std::string disk_fault_expired();
  // outage (runner_outage.cpp): non-empty (the reason) once the cluster manager has not answered
  // for [cluster] controller_timeout_s; and, at the end, the wait to cancel what it could not.
  std::string check_outage();
  std::string job_dir_gone();
  void cancel_left_jobs();
  // A finished job's model directory: `troupe export` in a process of its own (it loads libtorch),
  // once the nodes are stopped. False: the model could not be written (the reason in outcome_);
  // a troupe built without the plugin is no failure (the model is written later by `troupe export`).
  bool export_model();
  int write_model(int rc);
  std::string final_json(int rc);
  void last_metrics(const std::string& result_json);
  int start_from_init(const nn::dataset_info& info);

  // the job
  run_options opt_;
  troupe::clock& clock_;
  job::job_spec spec_;
  job::prepared_data data_;
  std::string setup_step_;                              // what setup() is doing, for an interruption's reason
  std::shared_ptr<std::atomic<bool>> prepare_running_;  // the import thread, while it runs
  // its directory
  std::optional<cluster::job_dir> dir_;
  std::string instance_;           // this run's instance id (collective::instance_key)
  int lock_fd_ = -1;               // flock on runner.lock for the runner's life
  bool nodes_dirty_ = false;       // a launch since nodes.json was written
  std::uint64_t nodes_epoch_ = 0;  // the membership epoch nodes.json was written with
  troupe::clock::time_point nodes_written_{};
  std::map<std::string, std::pair<troupe::clock::time_point, bool>> waiting_;  // name -> since, warned
  cluster::cut_off_hosts cut_off_;                                             // hosts cut (cut_off)
  // Tasks a resumed job's journal moved back to TODO (reopen_tasks): DONE ones, failed ones.
  std::uint64_t reopened_done_ = 0, reopened_failed_ = 0;
  std::unique_ptr<runner_beat> beat_;  // from the first launch on
  // its parts, declared before the transport and the launcher whose threads push into events_
  // and read watch_: those go first when the runner is destroyed
  event_queue events_;
  slot_table slots_;
  master_watch watch_;
  job_outcome outcome_;
  // its transport and launcher
  std::string master_addr_, self_addr_;
  cluster::control_plan plan_;  // where the runner, the master and the other nodes listen
  std::unique_ptr<endpoint> net_;
  std::unique_ptr<wire::rpc_client> rpc_;
  std::unique_ptr<cluster::launcher> launcher_;
  // launcher_ for the io thread's reply_scale (its check_host): null until start_launcher() set it
  // (the runner answers scale requests from start_transport() on).
  std::atomic<const cluster::launcher*> placer_{nullptr};
  std::string metrics_addr_;  // the master's /metrics, pinned in job.toml (empty: off)
  // [model] init loaded into checkpoints/init (a new job only): its state's directory and step,
  // for the timeline's `init` event once the job starts.
  std::optional<std::pair<std::string, std::uint64_t>> init_loaded_;
  // job_start/job_end, scale, fenced, replaced (the master writes membership and metrics).
  observe::job_timeline timeline_;
  // the loop's own
  bool resume_begun_ = false;  // begin_resumed_run ran
  std::string resumed_from_;   // --resume: how the run it continues ended (the timeline's job_start)
  // Warnings of the job file's reading (job_notes, a resumed job's /metrics port taken), said once
  // logs/runner.log is open, so that it has them too (they went to stderr alone), or at a setup's end.
  std::vector<std::string> setup_warnings_;
  void say_setup_warnings();
  static void sweep_killed_jobs_shm();
  std::string ps_checkpoints_free(const std::string& job_path) const;
  bool keep_record_ = false;  // a --resume that ended before it began: result.json and the timeline untouched
  bool nodes_started_ = false;           // the PS shards and workers are launched: scale requests act at once
  std::atomic<bool> stop_asked_{false};  // a stop came (io thread): scale requests are refused
  troupe::clock::time_point dir_checked_{};  // job_dir_gone's last look
  troupe::clock::time_point last_turn_{};    // watch_master's last call, on the system clock (real time)
  bool shutting_down_ = false;               // nodes are being stopped: exits are recorded, not relaunched
  std::optional<time_point> fault_since_;    // when the disk fault the master reports began
  std::string notice_;                       // the master's last notice printed (JobStatus.notice)
  std::string outage_note_;                  // on the progress line while the cluster manager is away
  std::optional<time_point> last_progress_;  // the last progress line
  std::optional<std::uint64_t> samples_at_start_;  // samples_total in the first status: the final line's rate
  // What jobs killed whole (runner too) left in /dev/shm, swept as a run begins (last: joined first).
  std::jthread shm_sweep_;
};

// [cluster] metrics_port 0 becomes a free port, written into `doc` (so job.toml pins it for every
// master incarnation) and `spec`. Returns "host:port", or "" when metrics_port is -1.
expected<std::string> pin_metrics_address(config_doc& doc, job::job_spec& spec);

}  // namespace troupe::control
