// What `troupe run` and `troupe config check` both check of a job beyond reading its file, so a
// job the check passes is a job `run` starts: the strategy exists and can train the model, the
// data the [data] section names exists and is of the right kind (a directory, a file, a record
// store). Every error names the key and what to do; callers exit 2 on it.
#pragma once

#include <string>
#include <vector>

#include "troupe/job/job_spec.hpp"
#include "troupe/nn/model.hpp"

namespace troupe::job {

// `strategies`: the names a strategy may have ([job] strategy), as the strategy registry lists
// them (actors::strategy_names()); job/ sits below the strategies and does not know them.
expected<void> check_job(const job_spec& spec, const std::vector<std::string>& strategies);

// Ring strategies replicate dense parameters only: a model with embedding tables needs async_ps.
expected<void> check_model_fits_strategy(const job_spec& spec, nn::model& m);

}  // namespace troupe::job
