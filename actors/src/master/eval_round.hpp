// The end-of-job evaluation as parts of the test set over the workers that hold the final model
// (docs/job.md, "Evaluation"): part i of n is rows [rows*i/n, rows*(i+1)/n) of the test set, which
// each worker reads itself. allreduce and async_ps replicas are one model at the end (the ring's last
// step, the shards), so their evaluation is spread over up to `max_parts` workers; local_sgd's
// replicas may differ, so one worker evaluates the whole test set. Part 0's worker also writes the
// job's final state (what `troupe export` writes the model from).
//
// A part whose worker leaves, or that is not answered within the timeout, goes to another worker; a
// part the model fails on (an error answer) counts as a failure, and past `max_failures` the round
// fails with the last error. A disk fault writing the final state is no failure of the model: that
// part is asked again `retry_after_fault` after its last ask, for as long as the fault lasts (the job's
// end pauses; the runner fails the job after job.disk_full_timeout_ms). Once every part is in, the metrics
// are those of the whole test set: loss and accuracy weighted by rows, AUC of all the scores (binary models).
//
// A plain class: the master drives it (master_status.cpp) with its clock's time; unit tests drive it
// by hand. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"

namespace troupe::actors {

struct eval_request {
  std::string worker;
  std::uint64_t id = 0;  // the correlation id to send it with
  std::uint32_t part = 0, parts = 1;
  bool write_state = false;
};

struct eval_answer {
  std::uint64_t rows = 0;
  double loss = 0, accuracy = 0;
  std::vector<float> scores, labels;  // binary models: each row's probability and label
  std::string error;                  // empty on success
  bool disk_fault = false;            // the error is a disk fault writing the final state
};

struct eval_metrics {
  std::uint64_t rows = 0;
  double loss = 0, accuracy = 0;
  std::optional<double> auc;    // binary models
  std::vector<std::string> by;  // the workers that answered, by part
};

class eval_round {
 public:
  eval_round(std::uint32_t max_parts, std::uint32_t max_failures, troupe::clock::duration timeout,
             troupe::clock::duration retry_after_fault = std::chrono::seconds(2))
      : max_parts_(max_parts), max_failures_(max_failures), timeout_(timeout), retry_(retry_after_fault) {}

  bool started() const { return !parts_.empty(); }
  // Plans the parts for `workers` (the candidates at the start; at least one), `spread` false: one.
  void start(const std::vector<std::string>& workers, bool spread);
  // What to send now: unassigned parts (and timed-out ones) to `workers` (the live candidates),
  // least loaded first, the first of `workers` among equals (a timed-out part: among equals, a worker
  // other than the one it timed out on). Ids are fresh for every send.
  std::vector<eval_request> due(const std::vector<std::string>& workers, troupe::clock::time_point now);
  // A worker left: its parts are unassigned.
  void gone(const std::string& worker);
  // An answer to request `id`, or to an earlier ask of the same part that timed out, from the worker
  // it was sent to (an evaluation slower than the timeout: its answer came after the part was asked
  // again, and every answer was ignored as stale, for ever); others are ignored (a worker's that
  // left). Returns the error when the answer is one (a disk fault's too,
  // though it does not count as a failure).
  std::optional<std::string> answer(std::uint64_t id, const std::string& worker, eval_answer a);
  bool failed() const { return failures_ >= max_failures_; }
  std::uint32_t failures() const { return failures_; }
  const std::string& last_error() const { return last_error_; }
  // Every part answered: the whole test set's metrics.
  std::optional<eval_metrics> result() const;
  // Who evaluates now ("worker-0, worker-1"), for the progress line; empty when nobody.
  std::string evaluating() const;

 private:
  struct part {
    std::string worker;  // empty: not assigned
    std::uint64_t id = 0;
    // Its earlier asks that timed out (id, worker): their answers count too, from that worker.
    std::vector<std::pair<std::uint64_t, std::string>> earlier;
    troupe::clock::time_point sent{};
    bool disk_fault = false;  // its last answer was a disk fault: asked again retry_ after `sent`
    std::optional<eval_answer> answer;
    std::string answered_by;
  };
  std::uint32_t max_parts_, max_failures_;
  troupe::clock::duration timeout_, retry_;
  std::vector<part> parts_;
  std::uint64_t next_id_ = 0;
  std::uint32_t failures_ = 0;
  std::string last_error_;
};

}  // namespace troupe::actors
