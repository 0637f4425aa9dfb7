// The trainer backend a job's [model] names, on the host: the native model registry's (lr, mlp,
// cnn, wide_deep, deepfm, sequential) or a TorchScript module (type = "torchscript", loaded through
// the plugin, troupe/actors/torchscript.hpp). Workers, PS shards (which store the same tensors and
// tables), the runner's and `troupe config check`'s checks and `troupe train --local` all build
// their replica here, so they agree on names, shapes and initial values.
#pragma once

#include <memory>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::actors {

expected<std::unique_ptr<trainer_backend>> make_host_backend(const job::job_spec& spec,
                                                             const nn::dataset_info& info);

// job::model_probe: builds the replica, says whether it has embedding tables.
expected<bool> check_model(const job::job_spec& spec, const nn::dataset_info& info);

}  // namespace troupe::actors
