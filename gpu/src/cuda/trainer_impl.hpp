// The CUDA device_trainer (private): the host model's graph node for node, dense parameters in
// one buffer. trainer.cpp: construction, parameters, host sync; trainer_step.cpp: the step.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "troupe/gpu/layers.hpp"
#include "troupe/gpu/trainer.hpp"

namespace troupe::gpu {

struct gpu_node {
  std::unique_ptr<device_layer> op;
  nn::layer* host = nullptr;
  std::vector<int> inputs;
  std::size_t width = 0;  // output floats per example
  bool needs_grad = false;
  device_buffer<float> out, grad, scratch;
  std::vector<const float*> in_ptrs;
  std::vector<float*> grad_ptrs;
};

struct param_range {
  std::size_t offset, size;
};

class trainer_impl final : public device_trainer {
 public:
  trainer_impl(int device, nn::model& m) : device_(device), model_(m) {}
  // Members (buffers, handles, then the stream) are released on the trainer's device.
  ~trainer_impl() override;
  expected<void> init(const nn::train_config& c);

  using device_trainer::compute_gradients;
  expected<float> compute_gradients(const nn::batch& b, const std::function<void()>& queue_more) override;
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  std::size_t dense_count() const override { return params_.size(); }
  void apply_gradients(double lr_scale = 1.0) override;
  expected<void> download(nn::model& m) override;
  expected<void> upload(const nn::model& m) override;
  std::size_t slot_count() const override { return slots_.size(); }
  expected<void> download_optimizer(std::span<float> slots, std::uint64_t& step) override;
  expected<void> upload_optimizer(std::span<const float> slots, std::uint64_t step) override;
  second_moments adam_moments() const override {
    return adam_ ? second_moments{slots_.data() + params_.size(), dense_step_} : second_moments{};
  }
  cuda_stream stream() const override { return stream_.get(); }
  expected<void> sync() override;
  int device() const override { return device_; }

 private:
  expected<void> build_nodes();
  expected<void> layout_params();
  expected<void> check_batch(const nn::batch& b) const;
  expected<void> stage_batch(const nn::batch& b);
  expected<void> reserve_batch(std::size_t n);
  expected<void> run_forward(const device_context& ctx);
  expected<void> run_backward(const device_context& ctx);
  expected<void> backward_node(std::size_t i, const device_context& ctx);
  expected<void> select() const;  // the calling thread may have another current device
  expected<std::vector<nn::dense_param*>> matching_params(nn::model& m) const;
  expected<void> take_pending();

  int device_;
  nn::model& model_;
  gpu::stream stream_;  // qualified: stream() names the accessor here
  blas_handle blas_;
  std::unique_ptr<device_optimizer> opt_;
  std::vector<gpu_node> nodes_;
  std::size_t output_ = 0, out_width_ = 0, classes_ = 2, dense_dim_ = 0;
  nn::loss_kind loss_ = nn::loss_kind::softmax_cross_entropy;
  std::vector<param_range> ranges_;
  device_buffer<float> params_, grads_, slots_;
  std::uint64_t dense_step_ = 0, step_ = 0;
  bool adam_ = false;  // slots_: Adam's first moments, then its second
  std::size_t capacity_ = 0;
  device_buffer<float> dense_in_, labels_, probs_, example_loss_, mean_loss_;
  pinned_buffer<float> stage_dense_, stage_labels_, loss_host_;
  std::vector<char> written_;
  std::vector<std::size_t> add_later_;
  error pending_;
};

}  // namespace troupe::gpu
