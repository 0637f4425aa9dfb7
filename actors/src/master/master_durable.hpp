// What the master saves across its restarts (<job dir>/counters.json: job_counters.hpp, with the
// totals of job_progress.hpp) and the disk faults of the job: its own saving them, and those other
// nodes report (DiskFault: a PS shard's checkpoints, a node's log). While one lasts the dispenser
// hands out no task. Only the master actor touches it (no locks); master_durable.cpp saves.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "job_counters.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::actors {

struct master_durable {
  std::string job_dir;
  std::uint64_t master_starts = 0;
  job_counters saved;                                  // what was last saved
  std::optional<troupe::clock::time_point> last_save;  // none: the next tick saves
  std::string fault;                                   // a disk fault saving them; empty when none
  // The faults other nodes reported, by node name and source.
  std::map<std::pair<std::string, std::string>, std::string> node_faults;
  std::string published_fault;  // the fault the dispenser was last told of

  // The job's disk faults, "; "-separated: the master's own first, then each one a node reported
  // ("ps-0: ...", "worker-1: ... (log write)").
  std::string job_fault() const;
};

}  // namespace troupe::actors
