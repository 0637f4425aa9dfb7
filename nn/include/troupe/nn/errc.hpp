// Errors of the nn module: bad shapes, bad model/optimizer configurations, unreadable or
// malformed data files. The context string of each error names the layer, key, file or record.
#pragma once

#include <system_error>

#include "troupe/core/error.hpp"

namespace troupe::nn {

enum class nn_errc {
  ok = 0,
  bad_shape = 1,     // tensor or batch shapes that do not fit a layer or model
  bad_config = 2,    // a model/optimizer/data option that makes no sense
  unknown_name = 3,  // a model, layer or optimizer name missing from its registry
  io_error = 4,      // a data file could not be opened or read
  bad_data = 5,      // a data file is malformed (wrong magic, truncated, bad record)
  model_failed = 6,  // the model's own code raised (a TorchScript module's forward or loss)
};

const std::error_category& nn_category() noexcept;
inline std::error_code make_error_code(nn_errc e) noexcept {
  return {static_cast<int>(e), nn_category()};
}

}  // namespace troupe::nn

template <>
struct std::is_error_code_enum<troupe::nn::nn_errc> : std::true_type {};
