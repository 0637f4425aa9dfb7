// How the job ended and what result.json says of it: the master's final metrics when it sent them
// (else the last counts it reported), with what only the runner knows: the outcome and its reason,
// wall time, node relaunches, the model written, the planted model's AUC.
//
// Contract:
// - Threads: one (the runner's loop, then its finish()); the master's result reaches it through the
//   runner's event queue.
// - Time: the clock given at construction (wall_seconds; runner_start_wall_ms is its wall_ms()).
// - The first word wins: a second JobFinished, a second stop request or a second end() is ignored,
//   so that the reason in result.json is the one that ended the job.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "troupe/core/clock.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::control {

// What final_json() takes from the rest of the runner.
struct outcome_facts {
  std::string job_id, strategy, model_type;
  std::optional<wire::job_status> status;  // the master's last status, when it ever answered
  std::uint64_t restarts = 0;
  bool resumed = false;
  std::uint64_t reopened_done = 0, reopened_failed = 0;  // runner::reopen_tasks
  double true_auc = 0;                                   // a planted dataset's; 0: none
  std::string init;  // [model] init: the model or job the job started from ("": none)
  // Why a job whose master reported it failed did (reads the task journal: called only then).
  std::function<std::string()> quarantine_reason;
};

// Whether a master's result text is a JSON object (what the runner keeps and merges into result.json).
bool result_is_object(const std::string& result_json);

class job_outcome {
 public:
  explicit job_outcome(troupe::clock& clk) : clock_(clk) {}

  // The job starts now (wall_seconds and runner_start_wall_ms count from here).
  void start();
  // The nodes are stopped: wall_seconds ends here (writing the model is timed apart).
  void nodes_stopped();
  // Seconds since start() on the clock.
  double seconds() const { return std::chrono::duration<double>(clock_.now() - started_).count(); }
  // The master's JobFinished; false when one came before (ignored).
  bool master_finished(std::string result_json, bool ok);
  bool finished() const { return finished_; }
  bool master_ok() const { return ok_; }
  const std::string& master_result() const { return result_json_; }

  // A stop request; the first one's reason is the job's.
  void stop_requested(std::string reason);
  bool stop_pending() const { return stop_; }
  const std::string& stop_reason() const { return stop_reason_; }

  // A failure that ends the job (exit 1 unless said otherwise); the first one is the reason.
  void fail(std::string why);
  const std::string& fatal() const { return fatal_; }
  // The state ("stopped", "interrupted", ...) and reason; ignored when one is set already.
  void end(std::string state, std::string reason);
  const std::string& state() const { return state_; }
  const std::string& reason() const { return reason_; }

  void model_written(std::string json_line, double seconds);
  void model_failed(std::string why);
  const std::string& model_error() const { return model_error_; }

  // result.json's text for exit code `rc`; settles state and reason (finished, failed) if unset.
  std::string final_json(int rc, const outcome_facts& f);

 private:
  void settle(int rc, const std::string& master_error, const outcome_facts& f);

  troupe::clock& clock_;
  troupe::clock::time_point started_{};
  std::int64_t started_wall_ms_ = 0;
  std::optional<troupe::clock::time_point> ended_;
  bool finished_ = false, ok_ = false, stop_ = false;
  std::string result_json_, stop_reason_, fatal_, state_, reason_;
  std::string model_json_, model_error_;
  double model_seconds_ = 0;
};

}  // namespace troupe::control
