// The native CPU backend: an nn::model and nn::trainer, their trainable parameters re-pointed into
// the backend's flat buffers (alias_flat), so the ring and the PS read and write the model's own
// memory. The CUDA backend keeps one as its host mirror.
#pragma once

#include <memory>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::actors {

class native_backend : public trainer_backend {
 public:
  // Takes the model; fails with bad_config on a bad optimizer configuration.
  static expected<std::unique_ptr<native_backend>> create(std::unique_ptr<nn::model> m,
                                                          const nn::train_config& config);

  std::string_view name() const override { return "native"; }
  expected<float> compute_gradients(const nn::batch& b) override { return trainer_->compute_gradients(b); }
  void apply_gradients(double lr_scale) override { trainer_->apply_gradients(lr_scale); }
  expected<float> step(const nn::batch& b) override { return trainer_->step(b); }
  std::span<float> parameters() override { return values_; }
  std::span<float> gradients() override { return grads_; }
  const std::vector<param_slice>& layout() const override { return layout_; }
  const std::vector<nn::dense_param*>& dense_parameters() override {
    return trainer_->trainable_parameters();
  }
  std::vector<std::span<float>> buffers() override;
  const nn::optimizer& optimizer() const override { return trainer_->get_optimizer(); }
  std::vector<nn::dense_slots>& optimizer_state() override { return trainer_->dense_state(); }
  std::vector<nn::embedding_table*> embedding_tables() override { return model_->embedding_tables(); }
  std::vector<std::uint64_t> batch_ids(const nn::batch& b, std::size_t t) override {
    return model_->batch_ids(b, t);
  }
  expected<float> predict(const nn::batch& b) override { return model_->forward(b, false); }
  std::span<const float> probabilities() const override {
    return {model_->probabilities().data(), model_->probabilities().size()};
  }
  std::size_t output_width() const override;

  nn::model& model() { return *model_; }

 protected:
  native_backend(std::unique_ptr<nn::model> m, std::unique_ptr<nn::trainer> t);

 private:
  std::unique_ptr<nn::model> model_;
  std::unique_ptr<nn::trainer> trainer_;
  std::vector<float> values_, grads_;
  std::vector<param_slice> layout_;
};

}  // namespace troupe::actors
