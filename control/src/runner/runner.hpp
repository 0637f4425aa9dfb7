// The job runner's state and steps (runner.cpp: the main loop; runner_setup.cpp: the job
// directory, new or resumed, and what a dead runner left there; runner_nodes.cpp: launching,
// relaunching, fencing and scaling nodes; runner_watch.cpp: the master's hang watch;
// runner_io.cpp: messages and the progress line; runner_result.cpp: result.json and the final
// line). Nodes are started, signalled and fenced only through the cluster::launcher interface,
// made by cluster::make_launcher from the job's [cluster] section. Every deadline and interval of
// the runner, its rpc client's and its launcher's read one clock, the runner's (tests: a manual one).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "troupe/cluster/bootstrap.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/launcher.hpp"
#include "troupe/control/runner.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/rpc.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::control {

// How often the runner asks the master for the job's status.
inline constexpr std::chrono::milliseconds status_poll_interval{250};

using job::job_spec;
using job::prepared_data;
using wire::job_status;
using wire::read_job_status;
using wire::rpc_client;
using wire::write_job_status;

struct node_slot {
  node_slot() = default;
  node_slot(node_id i, cluster::node_role r, std::size_t idx) : id(std::move(i)), role(r), index(idx) {}
  node_id id;  // current (or last) incarnation
  cluster::node_role role = cluster::node_role::worker;
  std::size_t index = 0;
  std::optional<cluster::node_handle> handle;  // while running
  bool wanted = true;                          // relaunch when it dies
  // The incarnation of the master whose membership listed this incarnation alive (unset: not
  // joined yet, or not since its launch); its absence from that master's view is a death.
  std::optional<std::uint64_t> seen_by_master;
  // This incarnation joined: listed in the master's membership (the master: it answered a status
  // request).
  bool joined = false;
  // Ends in a row before it joined, with nothing of troupe's in its output (start_failure.hpp).
  std::size_t start_failures = 0;
  bool fenced = false;           // SIGKILLed after the master declared it dead; its exit report follows
  std::uint64_t start_time = 0;  // of the running process (/proc/<pid>/stat), for nodes.json
  std::size_t place = 0;         // a worker's slot (`troupe node --slot`): the lowest free at launch
  std::string ended;             // how its last process ended, once it has
  std::deque<troupe::clock::time_point> deaths;  // recent, for the give-up rule
};
// A wanted slot, not running yet (assigned member by member: GCC 12 warns -Wmaybe-uninitialized
// on copies of an aggregate-initialised node_slot).
inline node_slot new_slot(node_id id, cluster::node_role role, std::size_t index) {
  node_slot s;
  s.id = std::move(id);
  s.role = role;
  s.index = index;
  return s;
}

// The master's latest status (valid once it answered).
struct status_snapshot : wire::job_status {
  bool valid = false;
};

// The exit code for a launcher that cannot start: 2 when the job file asks for what the backend
// does not have (an unknown partition), 1 when the backend itself fails (sbatch missing, the
// controller down).
int launcher_exit_code(const error& e);
// <name>-<YYYYmmdd-HHMMSS>-<4 hex>: the id of a job run without --job-id.
std::string default_job_id(const std::string& name);

class runner {
 public:
  explicit runner(run_options o, troupe::clock& clk = troupe::clock::system())
      : opt_(std::move(o)), clock_(clk) {}
  ~runner();
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;
  int run();

 private:
  using time_point = troupe::clock::time_point;
  // setup and main loop (runner.cpp)
  int setup();
  // The datasets (prepare_datasets) on a thread of their own, waited for until done or a stop
  // signal (then 128 + the signal, the import left running: run() ends the process).
  int prepare_data();
  // The stop signal the runner got (SIGINT, SIGTERM), 0 while none.
  static int interrupted_by();
  int check_model();
  int read_config(config_doc& doc);
  int open_job_dir(const config_doc& doc);
  int lock_job_dir();
  void clean_dead_runner(const cluster::job_dir& dir);
  void resume_ids(const cluster::nodes_file& old);
  void start_log();
  // A failed setup(): the job's end recorded when it has a directory of its own.
  int setup_ended(int rc);
  // Launches the master and waits until it answers; false (fatal_ set) when it does not come up.
  bool start_master();
  int loop();
  // Waits until an event is queued (exits_, scale_requests_, finished_, stop_: each producer
  // notifies wake_), a signal has come, or the next status poll is due; at most 100 ms, the bound
  // on noticing a signal (its handler cannot notify).
  void wait_for_events();
  void shutdown_nodes();
  // Drops the runner's name on the io thread, then closes the transport (rpc_ first).
  void close_endpoint();
  int finish(int rc);
  int setup_failed(const error& e, int rc);
  std::string final_json(int rc);
  // nodes (runner_nodes.cpp)
  expected<void> launch(node_slot& slot);
  // The `troupe node` arguments and launch spec of a node in `slot` (runner_nodes.cpp).
  cluster::node_args node_args_of(const node_slot& slot) const;
  cluster::node_spec launch_spec_of(const cluster::node_args& a, cluster::node_role role) const;
  // A TorchScript job on this machine alone keeps a standby worker (docs/models.md).
  void keep_standby();
  void handle_exits();
  // Counts an end before the node joined; true (fatal_ set) once it never starts, it seems.
  bool never_starts(node_slot& slot, const cluster::node_handle& h, const cluster::exit_status& status);
  void fence_dead_nodes();
  void watch_master();
  bool master_silent() const;
  std::uint64_t first_incarnation(const std::string& name) const;
  void scale_to(std::uint32_t workers);
  std::uint32_t running_workers() const;
  std::uint32_t launched_workers() const;  // wanted workers with a handle (running or queued)
  std::size_t free_place() const;
  bool spare_mode() const;
  std::uint32_t workers_kept() const;            // submitted: target_workers_, or max_workers in spare mode
  bool spare_slot(const node_slot& slot) const;  // launched into the spare partition
  void write_nodes_file();
  // io (runner_io.cpp)
  void on_message(const message& m);
  void poll_status(bool force = false);
  void print_progress(bool final_line);
  void answer_status(const std::string& node, const std::string& to, std::uint64_t id);
  // results (runner_result.cpp)
  // Non-empty (the reason) once a disk fault the master reports has lasted job.disk_full_timeout_ms.
  std::string disk_fault_expired();
  // outage (runner_outage.cpp): non-empty (the reason) once the cluster manager has not answered
  // for [cluster] controller_timeout_s; and, at the end, the wait to cancel what it could not.
  std::string check_outage();
  void cancel_left_jobs();
  // A finished job's model directory: `troupe export` in a process of its own (it loads libtorch),
  // once the nodes are stopped. Fills model_json_ or model_error_.
  void export_model();
  int start_from_init(const nn::dataset_info& info);

  run_options opt_;
  troupe::clock& clock_;
  job::job_spec spec_;
  std::optional<cluster::job_dir> dir_;
  job::prepared_data data_;
  std::string setup_step_;                              // what setup() is doing, for an interruption's reason
  std::shared_ptr<std::atomic<bool>> prepare_running_;  // the import thread, while it runs
  std::string master_addr_, self_addr_;
  cluster::control_plan plan_;  // where the runner, the master and the other nodes listen
  std::unique_ptr<endpoint> net_;
  std::unique_ptr<wire::rpc_client> rpc_;
  std::unique_ptr<cluster::launcher> launcher_;
  std::map<std::string, node_slot> nodes_;
  std::uint32_t target_workers_ = 0;
  std::uint64_t restarts_ = 0;
  // Worker indices are never reused: a scaled-up worker gets the next one (its own name), so the
  // master never mistakes it for a departed worker coming back.
  std::size_t next_worker_index_ = 0;
  // Incarnations of a resumed job continue after those its dead runner used (by node name).
  std::map<std::string, std::uint64_t> resumed_incarnations_;
  std::string instance_;  // this run's instance id (collective::instance_key)
  int lock_fd_ = -1;      // flock on runner.lock for the runner's life
  // The master's hang watch: when it last answered a status request, when it was launched.
  time_point master_heard_, master_launched_;
  bool master_answered_ = false;
  std::atomic<bool> master_quiet_{false};  // master_silent(), for the endpoint's thread
  std::string stop_reason_;                // who asked the job to stop
  bool shutting_down_ = false;             // nodes are being stopped: exits are recorded, not relaunched
  std::string end_state_, end_reason_;     // how the job ended, for result.json (set by loop())
  time_point started_;
  std::optional<time_point> last_poll_, last_progress_;  // the last status poll and progress line
  std::int64_t started_wall_ms_ = 0;                     // Unix ms at run(): the origin of first_step_seconds
  // Filled from the endpoint's and the launcher's threads, consumed by the main loop, which waits
  // on wake_ for them (events_pending()).
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<cluster::node_handle, cluster::exit_status>> exits_;
  std::deque<std::uint32_t> scale_requests_;
  std::string result_json_;
  bool result_ok_ = false;
  std::atomic<bool> finished_{false}, stop_{false};
  status_snapshot status_;
  std::string fatal_;
  // job_start/job_end, scale, fenced, replaced (the master writes membership and metrics).
  observe::job_timeline timeline_;
  std::string metrics_addr_;               // the master's /metrics, pinned in job.toml (empty: off)
  std::optional<time_point> fault_since_;  // when the disk fault the master reports began
  std::string outage_note_;                // on the progress line while the cluster manager is away
  // The model a finished job wrote (`troupe export`'s JSON line), or why it could not.
  std::string model_json_, model_error_;
  double model_seconds_ = 0;
  std::optional<time_point> ended_;  // when the nodes were stopped (wall_seconds ends there)
};

// [cluster] metrics_port 0 becomes a free port, written into `doc` (so job.toml pins it for every
// master incarnation) and `spec`. Returns "host:port", or "" when metrics_port is -1.
expected<std::string> pin_metrics_address(config_doc& doc, job::job_spec& spec);

}  // namespace troupe::control
