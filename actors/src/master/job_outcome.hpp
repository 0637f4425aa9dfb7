// How the job ends, as the master sees it (master_status.cpp): the dispenser's task counts (every
// task over?), the workers that finished their training loop, the end-of-job evaluation in parts
// (eval_round.hpp), the PS shards' final checkpoints (final_checkpoints.hpp) and the result, sent to
// the runner (JobFinished) and written to result.json once both are in.
// Only the master actor touches it (no locks).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "eval_round.hpp"
#include "final_checkpoints.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {

struct job_outcome {
  std::optional<wire::task_counts> counts;  // nullopt until the dispenser answered
  std::set<std::string> done_workers;       // by node name
  // The steps each worker incarnation reported ("worker-0#1"): who evaluates a model whose buffers
  // are each worker's own (batch norm under async_ps) is the one that trained most.
  std::map<std::string, std::uint64_t> steps_by;
  std::optional<eval_round> eval;           // once every task is over
  std::optional<final_checkpoints> shards;  // once every task is over, for a job with PS shards
  std::optional<nlohmann::json> metrics;    // the evaluation's, until the shards' checkpoints are in
  bool finished = false, ok = false;
  std::string result_json;
  bool runner_unreachable = false;  // the last JobFinished could not be sent (warned once)

  bool all_tasks_over() const { return counts && counts->all_over(); }
};

}  // namespace troupe::actors
