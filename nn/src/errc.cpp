#include "troupe/nn/errc.hpp"

#include <string>

namespace troupe::nn {
namespace {
class nn_category_impl final : public error_category {
 public:
  const char* name() const noexcept override { return "nn"; }
  // Their contexts are sentences: "model 'deepfm': is a binary (CTR) model, the data has 4 classes",
  // "init.toml: model.init ...: tensor 'w' has 10 values in the state, ...".
  bool context_says_it(int c) const noexcept override {
    return c == static_cast<int>(nn_errc::bad_config) || c == static_cast<int>(nn_errc::bad_shape);
  }
  std::string message(int c) const override {
    switch (static_cast<nn_errc>(c)) {
      case nn_errc::ok:
        return "ok";
      case nn_errc::bad_shape:
        return "bad shape";
      case nn_errc::bad_config:
        return "bad configuration";
      case nn_errc::unknown_name:
        return "unknown name";
      case nn_errc::io_error:
        return "I/O error";
      case nn_errc::bad_data:
        return "malformed data";
      case nn_errc::model_failed:
        return "the model failed";
    }
    return "unknown nn error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& nn_category() noexcept {
  static const nn_category_impl instance;
  return instance;
}

}  // namespace troupe::nn
