// The job's status in one C++ shape and its one translation each way: Cap'n Proto (JobStatus,
// TaskCounts in transport/schema/job.capnp) and the JSON of `troupe status --json`. The master
// builds it, the runner relays it (adding its own fields), the CLI prints it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "troupe/cluster/membership.hpp"
#include "troupe/transport/schema/job.capnp.h"
#include "troupe/wire/goodput_report.hpp"

namespace troupe::wire {

// The dispenser's counts (the master asks for them every tick).
struct task_counts {
  std::uint64_t todo = 0, doing = 0, done = 0, failed = 0;
  std::uint64_t requeued = 0;  // moved back to TODO so far
  std::uint32_t data_epoch = 0, data_epochs = 0;
  // Local only (the dispenser to its master; not in TaskCounts): records of DONE tasks, durable in
  // the journal, and a disk fault that pauses the dispenser (empty when none).
  std::uint64_t records_done = 0;
  std::string fault;
  std::string last_failure;  // the last error of a quarantined task (JobStatus.taskError)
  // Why the dispenser hands out no more tasks though some are TODO (job.max_quarantined_in_a_row);
  // empty while it does.
  std::string gave_up;
  std::uint64_t total() const { return todo + doing + done + failed; }
  // Every task is done or quarantined (and there are tasks), or the dispenser gave up on those left
  // and none is held.
  bool all_over() const { return total() > 0 && doing == 0 && (todo == 0 || !gave_up.empty()); }
};

struct job_status {
  std::string job_id;
  std::uint64_t epoch = 0, master_incarnation = 0;
  std::uint32_t workers_alive = 0, workers_target = 0, ps_alive = 0;
  std::uint32_t workers_launched = 0;  // by the runner: launched or queued, not ended (alive included)
  task_counts tasks;
  double samples_per_sec = 0, loss = 0;
  std::uint64_t samples_total = 0, restarts = 0;
  bool finished = false;
  std::string result_json;  // final metrics once finished
  std::string fault;        // a disk fault pausing the job; empty when none
  std::string evaluating;   // who evaluates the trained model now; empty when nobody does
  std::string task_error;   // the last error of a quarantined task; empty when none was quarantined
  std::string notice;       // the master's latest word for the job's console (JobStatus.notice)
  std::vector<cluster::member> members;
  goodput_report goodput;  // the latest of the ring's rank 0; valid false: none
  // loss: NaN until a progress window with a step has passed.
  bool has_loss() const;
};

// GoodputReport (WorkerProgress.goodput, JobStatus.goodput); read throws kj::Exception as below.
void write_goodput(schema::GoodputReport::Builder b, const goodput_report& g);
goodput_report read_goodput(schema::GoodputReport::Reader r);

void write_task_counts(schema::TaskCounts::Builder b, const task_counts& c);
task_counts read_task_counts(schema::TaskCounts::Reader r);
void write_job_status(schema::JobStatus::Builder b, const job_status& s);
// Throws kj::Exception on a malformed message (read it inside `guarded`).
job_status read_job_status(schema::JobStatus::Reader r);
// `troupe status --json`: job, membership_epoch, workers_alive, workers_target, ps_alive, tasks{todo, doing,
// done, failed, requeued}, data_epoch, data_epochs, samples_per_sec, loss, samples_total, restarts,
// finished, fault (only while a disk fault pauses the job), loss (null before the first step),
// evaluating (who evaluates the model, while one does), task_error (once a task is quarantined),
// notice (the master's latest word for the console, once it has one),
// result (the parsed result JSON, once finished), members[{node, role, address, pid, state}], goodput
// (goodput_report.hpp; only when a worker reported one).
nlohmann::json to_json(const job_status& s);

}  // namespace troupe::wire
