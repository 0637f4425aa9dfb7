// device_trainer on CUDA: one training step (stage the batch, forward, loss, backward).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "check.hpp"
#include "device_layers.hpp"
#include "kernels.hpp"
#include "trainer_impl.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::gpu {

// The checks of nn::model::forward, with the same messages.
expected<void> trainer_impl::check_batch(const nn::batch& b) const {
  const auto& info = model_.data_info();
  auto fail = [&](const std::string& why) {
    return make_unexpected(nn::nn_errc::bad_shape,
                           "model '" + model_.type() + "': batch from '" + b.data().info.name + "': " + why);
  };
  if (b.size() == 0) return fail("empty batch");
  const auto& d = b.data().info;
  if (d.dense_dim != info.dense_dim || d.sparse_fields != info.sparse_fields)
    return fail("dense_dim " + std::to_string(d.dense_dim) + " and sparse_fields " +
                std::to_string(d.sparse_fields) + ", the model was built for " +
                std::to_string(info.dense_dim) + " and " + std::to_string(info.sparse_fields));
  for (std::size_t i = 0; i < b.size(); ++i) {
    const float y = b.label(i);
    if (!(y >= 0 && y < static_cast<float>(classes_)))
      return fail("row " + std::to_string(b.row(i)) + " has label " + std::to_string(y) + " outside [0, " +
                  std::to_string(classes_) + ")");
  }
  return {};
}

// Per-batch buffers, grown to the largest batch seen.
expected<void> trainer_impl::reserve_batch(std::size_t n) {
  if (n <= capacity_) return {};
  for (auto& node : nodes_) {
    TROUPE_GPU_TRY(reserve(node.out, n * node.width));
    TROUPE_GPU_TRY(reserve(node.grad, n * node.width));
  }
  TROUPE_GPU_TRY(reserve(dense_in_, n * dense_dim_));
  TROUPE_GPU_TRY(reserve(labels_, n));
  TROUPE_GPU_TRY(reserve(probs_, n * out_width_));
  TROUPE_GPU_TRY(reserve(example_loss_, n));
  TROUPE_GPU_TRY(reserve(mean_loss_, 1));
  for (auto* st : {&stage_dense_, &stage_labels_}) {
    const std::size_t want = st == &stage_dense_ ? n * dense_dim_ : n;
    if (want == 0 || st->size() >= want) continue;
    auto p = pinned_buffer<float>::alloc(want);
    if (!p) return std::move(p).err();
    *st = std::move(*p);
  }
  capacity_ = n;
  return {};
}

// Gathers the batch's dense rows and labels into pinned memory and queues their upload. The
// previous step ended with a stream sync, so the stages are free.
expected<void> trainer_impl::stage_batch(const nn::batch& b) {
  const std::size_t n = b.size();
  if (dense_dim_) {
    if (b.contiguous()) {
      std::memcpy(stage_dense_.data(), b.dense_row(0), n * dense_dim_ * sizeof(float));
    } else {
      for (std::size_t i = 0; i < n; ++i)
        std::memcpy(stage_dense_.data() + i * dense_dim_, b.dense_row(i), dense_dim_ * sizeof(float));
    }
    TROUPE_GPU_TRY(detail::copy_to_device(dense_in_.data(), stage_dense_.data(),
                                          n * dense_dim_ * sizeof(float), stream_.get()));
  }
  for (std::size_t i = 0; i < n; ++i) stage_labels_.data()[i] = b.label(i);
  return detail::copy_to_device(labels_.data(), stage_labels_.data(), n * sizeof(float), stream_.get());
}

expected<void> trainer_impl::run_forward(const device_context& ctx) {
  for (auto& n : nodes_) TROUPE_GPU_TRY(n.op->prepare(ctx));
  for (auto& n : nodes_) {
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      n.in_ptrs[k] = nodes_[static_cast<std::size_t>(n.inputs[k])].out.data();
    TROUPE_GPU_TRY(n.op->forward(ctx, n.in_ptrs, n.out.data()));
  }
  return {};
}

expected<float> trainer_impl::compute_gradients(const nn::batch& b, const std::function<void()>& queue_more) {
  TROUPE_GPU_TRY(take_pending());
  TROUPE_GPU_TRY(check_batch(b));
  TROUPE_GPU_TRY(select());
  const std::size_t n = b.size();
  TROUPE_GPU_TRY(reserve_batch(n));
  TROUPE_GPU_TRY(stage_batch(b));
  device_context ctx{stream_.get(), blas_.get(), n, true, step_++, &b, dense_in_.data()};
  TROUPE_GPU_TRY(run_forward(ctx));
  const float* logits = nodes_[output_].out.data();
  TROUPE_GPU_TRY(loss_forward(loss_, logits, labels_.data(), n, out_width_, probs_.data(),
                              example_loss_.data(), mean_loss_.data(), stream_.get()));
  TROUPE_GPU_TRY(run_backward(ctx));
  if (queue_more) queue_more();
  TROUPE_GPU_TRY(detail::copy_to_host(loss_host_.data(), mean_loss_.data(), sizeof(float), stream_.get()));
  TROUPE_GPU_TRY(stream_.sync());
  return loss_host_.data()[0];
}

expected<void> trainer_impl::run_backward(const device_context& ctx) {
  gpu_node& out = nodes_[output_];
  TROUPE_GPU_TRY(loss_backward(loss_, probs_.data(), labels_.data(), ctx.batch, out_width_, out.grad.data(),
                               stream_.get()));
  written_.assign(nodes_.size(), 0);
  written_[output_] = 1;
  for (std::size_t i = output_ + 1; i-- > 0;)
    if (written_[i]) TROUPE_GPU_TRY(backward_node(i, ctx));
  return {};
}

// As nn::model::backward_node: an input feeding several consumers gets the first gradient
// written in place and the others added from a scratch buffer.
expected<void> trainer_impl::backward_node(std::size_t i, const device_context& ctx) {
  gpu_node& n = nodes_[i];
  add_later_.clear();
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    const auto j = static_cast<std::size_t>(n.inputs[k]);
    gpu_node& in = nodes_[j];
    if (!in.needs_grad) {
      n.grad_ptrs[k] = nullptr;
    } else if (!written_[j]) {
      n.grad_ptrs[k] = in.grad.data();
      written_[j] = 1;
    } else {
      TROUPE_GPU_TRY(reserve(in.scratch, capacity_ * in.width));
      n.grad_ptrs[k] = in.scratch.data();
      add_later_.push_back(j);
    }
  }
  TROUPE_GPU_TRY(n.op->backward(ctx, n.in_ptrs, n.out.data(), n.grad.data(), n.grad_ptrs));
  for (std::size_t j : add_later_)
    TROUPE_GPU_TRY(launched(kernels::add_into(nodes_[j].grad.data(), nodes_[j].scratch.data(),
                                              ctx.batch * nodes_[j].width, stream_.get()),
                            "add_into"));
  return {};
}

}  // namespace troupe::gpu
