// The job's model, built for the schema of its training store. Workers and PS shards build it the
// same way (same config, same seed), so parameter names, shapes and embedding tables agree.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "troupe/job/job_spec.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::record_store& train);
// The same from the training store's manifest (a worker whose records are served).
expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::manifest& train,
                                                 const std::string& name);

// The job's own copy of its training store's manifest, <job dir>/train_manifest.toml (the runner
// writes it as the job starts): the rows' shape and encoding, which an export writes into
// model.json. An export needed the store itself: a job whose store was removed or damaged since
// could not give its model out.
std::string train_manifest_path(const std::string& job_dir);
expected<void> write_train_manifest(const std::string& job_dir, const storage::manifest& m);
// nullopt when the job has no copy (a job started before 2026-12-03); an error when it cannot be read.
expected<std::optional<storage::manifest>> read_train_manifest(const std::string& job_dir);

}  // namespace troupe::job
