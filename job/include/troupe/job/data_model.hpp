// The job's model, built for the schema of its training store. Workers and PS shards build it the
// same way (same config, same seed), so parameter names, shapes and embedding tables agree.
#pragma once

#include <memory>

#include "troupe/job/job_spec.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::record_store& train);
// The same from the training store's manifest (a worker whose records are served).
expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::manifest& train,
                                                 const std::string& name);

}  // namespace troupe::job
