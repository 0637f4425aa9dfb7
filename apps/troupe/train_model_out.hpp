// `troupe train --local`'s model (docs/model_format.md): like a job's, a model directory written from
// the trained state. The state goes into a job directory of its own under [job] root
// (<name>-local-<unix ms>: job.toml, result.json, checkpoints/final), which `troupe export` then
// reads as it reads any job's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "troupe/core/config.hpp"
#include "troupe/core/error.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::cli {

// A native model's state: every dense tensor by name (buffers too), its tables' rows.
storage::flat_state state_of(nn::model& m);

// Writes the job directory and exports its model; returns the model directory.
expected<std::string> write_local_model(const config_doc& doc, const job::job_spec& spec,
                                        const storage::flat_state& state, const nlohmann::json& result,
                                        std::uint64_t steps);

}  // namespace troupe::cli
