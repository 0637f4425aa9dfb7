// The master's counters that must outlive it: kept in <job dir>/counters.json (written atomically,
// read back by a restarted master, by `troupe run --resume` and by anyone reading the job dir).
// The task journal keeps the rest durable (requeues, records of DONE tasks: task_journal.hpp).
//
//   {"samples_trained": N, "dropped_steps": N, "first_step_wall_ms": N, "master_starts": N}
//
// samples_trained counts every sample of every step the master heard of (re-trained ones
// included); progress a worker sent while no master was up is lost, so the final JSON never
// reports fewer than the journal's records_done.
#pragma once

#include <cstdint>
#include <string>

#include "troupe/core/error.hpp"

namespace troupe::actors {

struct job_counters {
  std::uint64_t samples_trained = 0, dropped_steps = 0;
  std::uint64_t first_step_wall_ms = 0;  // Unix ms of the job's first trained minibatch; 0: none yet
  std::uint64_t master_starts = 0;       // master processes (or actors) started for this job
  bool operator==(const job_counters&) const = default;
};

std::string counters_path(const std::string& job_dir);
// Zeros when the file does not exist; an error naming the file when it is unreadable or malformed.
expected<job_counters> load_counters(const std::string& job_dir);
// Atomic replace; a disk fault reads "no space left on device: <path> ...".
expected<void> save_counters(const std::string& job_dir, const job_counters& c);

}  // namespace troupe::actors
