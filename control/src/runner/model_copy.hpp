// The job directory's copy of what a job's workers load.
//
// A job runs its model as it was when the job began: the runner copies what the workers load into
// the job directory — a TorchScript job's module file to module.pt, a prediction job's model
// directory (its model.json and model.pt) to model_in/ — and the job's copy of the job file names the
// copy, so every worker (a relaunched one, one joining later), a resumed run and `troupe export` load
// the same model. A module the user rewrote mid-job (model.py exported again, with other layers) was
// loaded by every worker started since: its pulls from the PS shards failed on every batch ("waiting
// for the PS shards" for ever, the task it held never done) and the export wrote the job's tensors
// into the new module; a model directory exported again over the one a prediction ran scored the
// tasks of a relaunched worker with the new model.
#pragma once

#include <string>

#include "troupe/core/error.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::control {

// The copy's name in the job directory ("module.pt", "model_in"); empty: the model is not copied.
std::string model_copy_name(const job::job_spec& spec);
// The model at `from` (a module file, or a model directory's model.json and model.pt) copied to `to`;
// an io_error naming model.path and `to` when it cannot be.
expected<void> copy_model(const job::job_spec& spec, const std::string& from, const std::string& to);

}  // namespace troupe::control
