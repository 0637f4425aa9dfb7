// The trainer backend a job's [model] names, on the host: the native model registry's (lr, mlp,
// cnn, wide_deep, deepfm, sequential) or a TorchScript module (type = "torchscript", loaded through
// the plugin, troupe/actors/torchscript.hpp). Workers, PS shards (which store the same tensors and
// tables), the runner's and `troupe config check`'s checks and `troupe train --local` all build
// their replica here, so they agree on names, shapes and initial values.
#pragma once

#include <memory>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/model/state.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

expected<std::unique_ptr<trainer_backend>> make_host_backend(const job::job_spec& spec,
                                                             const nn::dataset_info& info);

// What a worker's make_host_backend loads whatever the worker's identity, loaded ahead by a
// standby (cluster/standby.hpp) from the job's spec and its training store: for a TorchScript
// model the plugin and, on the CPU, the module too; the next make_host_backend of this process
// with the same options takes that replica instead of loading its own. Native models: nothing.
// Returns what it loaded, for the log ("" for nothing); a failure is only logged, since the worker
// meets it again and reports it as usual.
std::string preload_host_backend(const job::job_spec& spec, const std::string& train_dir);

// job::model_probe: builds the replica, says whether it has embedding tables.
expected<bool> check_model(const job::job_spec& spec, const nn::dataset_info& info);
// The last task of an epoch holds what the others leave (`records` % job.records_per_task): one that
// ends in a batch of one row, with a TorchScript module that cannot train on one (batch norm), is
// refused naming job.records_per_task and a value that leaves no such batch (the runner, once it
// knows the training store's records; check_model refuses tasks that each end so).
expected<void> check_last_task(const job::job_spec& spec, const nn::dataset_info& info,
                               std::uint64_t records);
// Whether a built-in model's dense layers (model.hidden) fit this machine's memory with their
// gradients and Adam's moments; an error naming model.hidden and the sizes when not (check_model's
// first check, for `troupe train --local`, which builds its model itself: std::bad_alloc otherwise).
expected<void> check_fits_memory(const job::job_spec& spec, const nn::dataset_info& info);

// A replica's whole state (model/state.hpp's format: parameters and buffers by name, optimizer slots,
// the rows of its own embedding tables), as `troupe train --local` keeps the model it trained.
expected<storage::flat_state> snapshot_state(trainer_backend& b);

// [model] init: whether the state fits the replica the job builds: every trainable tensor present,
// every tensor and buffer the state names of the model's size, embedding rows of the tables' width.
// Errors name the tensor (or table) and both shapes.
// `complete` false (a resumed job's own checkpoints, which may not hold every tensor yet: a shard
// that never wrote one): absent tensors are no error, but a state of which no tensor is the model's is.
expected<void> check_init_state(const job::job_spec& spec, const nn::dataset_info& info,
                                const storage::shard_state& state, bool complete = true);

// [model] init's state (a model or job directory), loaded and checked by check_init_state. Errors
// are wrapped "model.init" (the loader's name the path) or "model.init <path>: the state does not
// fit this job's model".
expected<model::loaded_state> load_init_state(const job::job_spec& spec, const nn::dataset_info& info);

// job::model_probe of a new job (`troupe run`, `troupe config check`): check_model, then the state
// [model] init names (a model or job directory), loaded and checked by check_init_state, so a job
// whose init is missing or does not fit is refused before its directory is made. Errors about the
// init are wrapped "model.init <path>".
expected<bool> check_model_and_init(const job::job_spec& spec, const nn::dataset_info& info);

}  // namespace troupe::actors
