// The job's timeline as its writers see it: one typed call per kind of event, so the master, the
// dispenser, the PS shards, the runner and every node's stats reporter write the same field names
// that the dashboard and `troupe status` read (docs/observe.md lists them).
//
// Contract: a job_timeline never fails its caller. The file (<job dir>/events.jsonl) is opened on
// the first event; if it cannot be opened or written, the first error is logged (spdlog warn) and
// events are dropped until a later open succeeds. Appends are whole lines (event_log), so several
// processes may write the same file. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::observe {

// One `metrics` event: the master's periodic progress.
struct metrics_sample {
  std::uint64_t samples = 0;   // trained so far
  std::optional<double> loss;  // mean minibatch loss over the last window (unset before any step)
  double samples_per_s = 0;
  std::uint64_t workers_alive = 0, epoch = 0, restarts = 0;
  std::uint64_t tasks_todo = 0, tasks_doing = 0, tasks_done = 0, tasks_failed = 0, tasks_requeued = 0;
  // The goodput report of the ring's rank 0 (docs/goodput.md), when a worker sent one: the gradient
  // noise scale (samples), the global batch, the measured goodput, the learning rate's factor and
  // the scale-invariant steps.
  struct goodput_sample {
    double noise_scale = 0, batch = 0, goodput = 0, lr_factor = 1, progress = 0;
    bool ring = true;  // false: async_ps's shards' estimate, whose job has no global batch or goodput
  };
  std::optional<goodput_sample> goodput;
};

// A batch choice of a job with [train] batch = "auto" (docs/goodput.md): `batch` replaces `from`,
// each replica computing accum_steps + 1 micro-batches of local_batch samples; the goodput the model
// predicted for it and for the batch it replaced.
struct batch_choice {
  std::uint64_t choice = 0, batch = 0, from = 0, local_batch = 0, accum_steps = 0, replicas = 0;
  double predicted_goodput = 0, previous_goodput = 0, noise_scale = 0;
  double at_progress = 0;  // the scale-invariant step it was made at
};

// How often a periodic event (metrics, node_stats) is written: every `first` while its writer is
// young, every `later` once it has run `settle`. A day-long job's timeline was a metrics line a
// second and a node_stats line per node every 5 s (33 MB a day with 3 nodes, 147 MB with 64
// workers), and the dashboard's page keeps every event it reads: a long job's events thin out, a
// short job's (and the start of every job) keep their detail.
struct report_pace {
  std::chrono::milliseconds first, later;
  std::chrono::seconds settle{600};
  std::chrono::milliseconds at(clock::duration age) const { return age < settle ? first : later; }
};
// The master's metrics events: each second for ten minutes, then every 5 s.
inline constexpr report_pace metrics_pace{std::chrono::seconds(1), std::chrono::seconds(5)};
// Every node's node_stats: each 5 s for ten minutes, then every 30 s.
inline constexpr report_pace node_stats_pace{std::chrono::seconds(5), std::chrono::seconds(30)};

class job_timeline {
 public:
  job_timeline() = default;                           // writes nothing (no job directory)
  explicit job_timeline(const std::string& job_dir);  // empty: writes nothing
  ~job_timeline();
  // Writes to <job_dir>/events.jsonl from now on (for owners that learn their directory late).
  void open(const std::string& job_dir);
  job_timeline(const job_timeline&) = delete;
  job_timeline& operator=(const job_timeline&) = delete;

  // `resumed`: a --resume, how the run it continues ended ("stopped", "failed", ...; "dead": its
  // runner died, leaving no end): the event says so (resumed, cause), as `troupe status` and the
  // dashboard list it; empty for a new job.
  void job_start(const std::string& strategy, std::uint64_t workers, std::uint64_t min_workers,
                 std::uint64_t max_workers, const std::string& model, const std::string& resumed = {});
  // "join", "leave", "died", "preempted", "fenced" or "replaced" of `node` ("worker-3#1").
  void membership(const std::string& kind, const std::string& node, std::uint64_t epoch,
                  const std::string& cause = {});
  // A node event without an epoch, from the control plane: "fenced", "replaced".
  void node_event(const std::string& kind, const std::string& node, const std::string& cause);
  void requeue(const std::string& holder, std::uint64_t tasks, const std::string& cause);
  void quarantine(std::uint64_t task, const std::string& error);
  void checkpoint(const std::string& node, std::uint64_t version, bool full);
  void scale(std::uint64_t workers, std::uint64_t requested);
  // [model] init: the job starts from `from` (a model or job directory): its state `state`, `step`.
  void model_init(const std::string& from, const std::string& state, std::uint64_t step);
  // The job's model directory written (`troupe export`), in `seconds`.
  void model_exported(const std::string& dir, double seconds);
  void metrics(const metrics_sample& m);
  // "batch": a batch choice; "batch_measured": the goodput measured at it afterwards.
  void batch_chosen(const batch_choice& c);
  void batch_measured(std::uint64_t choice, std::uint64_t batch, double measured_goodput,
                      double predicted_goodput);
  void node_stats(const std::string& node, double cpu_percent, std::uint64_t rss_bytes);
  // "finished", "failed", "stopped" or "interrupted" (as result.json's status); durable (fdatasync'ed).
  void job_end(const std::string& state, const std::string& why = {});

  // Appends any event (the typed calls above go through it).
  void append(job_event e, bool durable = false);

 private:
  std::string path_;
  std::mutex mu_;
  std::unique_ptr<event_log> log_;
  bool warned_ = false;
};

// A running process's CPU use (percent of one core since the previous sample) and resident set,
// from /proc/<pid>/stat and /proc/<pid>/statm.
struct process_sample {
  double cpu_percent = 0;
  std::uint64_t rss_bytes = 0;
};
class process_sampler {
 public:
  // pid 0: this process. CPU percent is over `clk`'s time between samples.
  explicit process_sampler(int pid = 0, troupe::clock& clk = clock::system());
  // The first call's CPU figure is since the process started. nullopt: the process is gone.
  std::optional<process_sample> sample();

 private:
  int pid_;
  troupe::clock& clock_;
  double last_cpu_s_ = -1;
  clock::time_point last_{};
};

// Every node reports itself: a thread that appends node_stats{node, cpu_percent, rss_bytes} for
// this process at `pace` (by the reporter's age) until destroyed (the destructor joins it promptly).
class node_stats_reporter {
 public:
  node_stats_reporter(const std::string& job_dir, std::string node, report_pace pace = node_stats_pace);
  ~node_stats_reporter();
  node_stats_reporter(const node_stats_reporter&) = delete;
  node_stats_reporter& operator=(const node_stats_reporter&) = delete;

 private:
  job_timeline timeline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace troupe::observe
