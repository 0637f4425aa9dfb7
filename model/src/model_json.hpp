// model.json (docs/model_format.md) for an exported model: what it takes to turn a raw row into the
// module's inputs (the training store's schema and, for a store imported from a CSV, its columns and
// import settings), and where the model came from (the job, its state, its final metrics).
#pragma once

#include <string>

#include "troupe/core/error.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/model/export_job.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::model {

struct model_json_input {
  const job::job_spec& spec;
  const storage::manifest& train;
  std::string job_dir;  // result.json's metrics, the job id (its folder name)
  const export_report& report;
};

// The JSON text.
std::string model_json(const model_json_input& in);
// Writes <dir>/model.json. Errors: io_error naming the file.
expected<void> write_model_json(const std::string& dir, const model_json_input& in);

}  // namespace troupe::model
