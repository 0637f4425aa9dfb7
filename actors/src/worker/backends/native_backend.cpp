#include "native_backend.hpp"

namespace troupe::actors {

expected<std::unique_ptr<native_backend>> native_backend::create(std::unique_ptr<nn::model> m,
                                                                 const nn::train_config& config) {
  auto t = nn::trainer::create(*m, config);
  if (!t) return t.err();
  return std::unique_ptr<native_backend>(new native_backend(std::move(m), std::move(*t)));
}

native_backend::native_backend(std::unique_ptr<nn::model> m, std::unique_ptr<nn::trainer> t)
    : model_(std::move(m)), trainer_(std::move(t)) {
  layout_ = alias_flat(trainer_->trainable_parameters(), values_, grads_);
}

std::vector<std::span<float>> native_backend::buffers() {
  std::vector<std::span<float>> out;
  for (auto* p : model_->parameters())
    if (!p->trainable) out.emplace_back(p->value.data(), p->value.size());
  return out;
}

std::size_t native_backend::output_width() const {
  return model_->num_classes() == 2 ? 1 : model_->num_classes();
}

}  // namespace troupe::actors
