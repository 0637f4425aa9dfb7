// What `troupe run` and `troupe config check` both check of a job beyond reading its file, so a
// job the check passes is a job `run` starts: the strategy exists and can train the model, the
// data the [data] section names exists and is of the right kind (a directory, a file, a record
// store; a test store of the training store's shape). Every error names the key and what to do;
// callers exit 2 on it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <cstdint>

#include "troupe/job/job_spec.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::job {

// `strategies`: the names a strategy may have ([job] strategy), as the strategy registry lists
// them (actors::strategy_names()); job/ sits below the strategies and does not know them.
// `model`: builds the job's model for data of that shape, as a worker would (the trainer
// backends, actors::check_model: a TorchScript module is loaded and run once), and says whether
// it has embedding tables.
using model_probe = std::function<expected<bool>(const job_spec& spec, const nn::dataset_info& info)>;
expected<void> check_job(const job_spec& spec, const std::vector<std::string>& strategies,
                         const model_probe& model);

// What `config check` knows of the data a [data] section names before `run` imports it: its shape,
// enough to build the model, and the training set's records where they are known without reading the
// rows (a store's count, the Fashion-MNIST labels file's header, synthetic-ctr's `rows`; a Criteo file
// is counted only by reading it all).
struct nominal_data {
  nn::dataset_info info;
  std::optional<std::uint64_t> train_records;
};
expected<nominal_data> nominal_data_of(const nn::data_config& c);

// Ring strategies replicate dense parameters only: a model with embedding tables needs async_ps.
expected<void> check_model_fits_strategy(const job_spec& spec, bool has_embedding_tables);

// What a valid job file probably does not mean as written, one line each (`troupe config check`
// prints them as notes, `troupe run` logs them as warnings): [train] device = "gpu" is `troupe
// train --local`'s switch, while the job's workers follow [job] device.
std::vector<std::string> job_notes(const job_spec& spec);

// The task journal's options of a job training on the store in `train_dir` of `records` records (the
// master's dispenser makes or reopens the journal with them; a resumed runner checks them first).
storage::journal_options journal_options_of(const job_spec& spec, const std::string& train_dir,
                                            std::uint64_t records);
// A journal made with `made` that `now` (the job file as it is) no longer matches: what differs,
// named by the job file's key ("train.epochs is 5, the journal was made for 3"); "" when it matches.
std::string journal_mismatch(const storage::journal_options& made, const storage::journal_options& now);

// Why `name` (job.name) cannot begin a job's default id ("<name>-<time>-<random>", a directory
// name); "" when it can.
std::string name_problem(const std::string& name);

}  // namespace troupe::job
