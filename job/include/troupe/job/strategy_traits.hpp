// What a job needs to know of its training strategy beyond the worker's step (docs/strategies.md,
// "What the job knows of a strategy"): whether its model lives on PS shards (the runner launches
// them, their checkpoints are the job's state), whether its replicas are one model at the end (the
// test set is then evaluated in parts over the workers), whether it sizes a synchronous ring's
// global batch (`train.batch = "auto" | "global"`, `train.lr_scaling`), whether it trains at all
// (`predict`: the job `troupe predict` and `evaluate` make), and whether it reads `job.sync_every`
// (a key given to a strategy that reads none of these is noted: it has no effect).
//
// The built-ins are known here; a new strategy registers its traits with its factory
// (actors::strategy_registrar), so that `[job] strategy = "its name"` is read, checked and run as
// the built-ins are. Thread-safe; names are compared exactly.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe::job {

struct strategy_traits {
  bool uses_ps = false;        // parameters on PS shards (launched with the job), not on the workers
  bool replicas_agree = true;  // one model on every worker at the end: evaluated in parts
  bool global_batch = false;   // a synchronous ring's global batch: batch auto/global, lr_scaling
  bool trains = true;          // false: runs an exported model over rows (predict)
  bool syncs_every = false;    // averages replicas every job.sync_every local steps (local_sgd)
};

// Registers (or replaces) the traits of `name`.
void register_strategy_traits(const std::string& name, strategy_traits t);
// The traits of `name`; nullopt for a name nothing registered.
std::optional<strategy_traits> traits_of(const std::string& name);
// The names of the strategies that train, sorted (what a job file may choose).
std::vector<std::string> training_strategies();

}  // namespace troupe::job
