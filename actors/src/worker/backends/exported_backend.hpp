// A model directory's model.pt as a backend that predicts and never trains ([model] type =
// "exported": prediction jobs, `troupe predict` and `troupe evaluate`). Forward goes through the
// TorchScript plugin's predictor (troupe/model/predictor.hpp); the logits become probabilities
// (sigmoid for one logit, softmax otherwise) and the batch's mean loss against its labels (logistic
// or cross-entropy, computed from the logits in double precision).
#pragma once

#include <memory>
#include <string>

#include "troupe/actors/trainer_backend.hpp"

namespace troupe::actors {

// Errors name the directory and the problem: no model (model::read_model_dir's), data whose dense
// width or sparse fields differ from what model.json says the model takes (both numbers), the
// plugin's or the module's.
expected<std::unique_ptr<trainer_backend>> make_exported_backend(const std::string& model_dir,
                                                                 const nn::dataset_info& data, int threads,
                                                                 std::size_t max_batch);

}  // namespace troupe::actors
