// GPU versions of the nn layers, losses and optimizers, working on raw device pointers on one
// stream. A device_layer mirrors one nn::layer (built from it after the host model's finish()):
// same shapes, same parameter order, same forward/backward contract as nn/layer.hpp —
// backward OVERWRITES its parameter gradients and grad_in[i] (which may be null).
// Supported kinds: input, dense, relu, sigmoid, dropout, flatten, concat, add, sum, fm,
// embedding. Others (conv2d, maxpool2d, batchnorm) give gpu_errc::unsupported naming the layer.
//
// Errors: every call returns the launch/cuBLAS error naming the kernel or call; asynchronous
// kernel faults surface at the next stream sync.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "troupe/gpu/cuda.hpp"
#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/loss.hpp"
#include "troupe/nn/optimizer.hpp"

struct cublasContext;

namespace troupe::gpu {

using cublas_handle = cublasContext*;

// A cuBLAS handle whose work goes to one stream (pointer mode host, default FP32 math: no TF32).
class blas_handle {
 public:
  static expected<blas_handle> create(cuda_stream s);
  blas_handle() = default;
  blas_handle(blas_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  blas_handle& operator=(blas_handle&& o) noexcept;
  blas_handle(const blas_handle&) = delete;
  blas_handle& operator=(const blas_handle&) = delete;
  ~blas_handle();
  cublas_handle get() const noexcept { return h_; }

 private:
  explicit blas_handle(cublas_handle h) : h_(h) {}
  cublas_handle h_ = nullptr;
};

struct device_context {
  cuda_stream stream = nullptr;
  cublas_handle blas = nullptr;
  std::size_t batch = 0;               // examples in this batch
  bool training = true;                // dropout active
  std::uint64_t step = 0;              // drives dropout masks, as nn::forward_context::step
  const nn::batch* input = nullptr;    // the host batch (embedding layers read its ids)
  const float* dense_input = nullptr;  // the batch's dense features on the device [batch, dense_dim]
};

class device_optimizer;

class device_layer {
 public:
  virtual ~device_layer() = default;
  virtual std::string kind() const = 0;
  // Where the layer's trainable parameters and their gradients live, in the host layer's
  // params() order (views into the trainer's contiguous buffers). Called before forward.
  virtual void bind(std::span<float* const> values, std::span<float* const> grads) {}
  // Host-side work for the batch before forward (embedding: map ids, upload new rows).
  virtual expected<void> prepare(const device_context& ctx) { return {}; }
  virtual expected<void> forward(const device_context& ctx, std::span<const float* const> in, float* out) = 0;
  virtual expected<void> backward(const device_context& ctx, std::span<const float* const> in,
                                  const float* out, const float* grad_out,
                                  std::span<float* const> grad_in) = 0;

  // Embedding layers only (no-ops elsewhere):
  // the optimizer step on the rows the last backward touched;
  virtual expected<void> apply_sparse(const device_optimizer& opt, cuda_stream s) { return {}; }
  // device rows -> host table (every id seen so far); host table -> device rows (ids seen so far);
  virtual expected<void> download_table(nn::embedding_table& t, cuda_stream s) { return {}; }
  virtual expected<void> upload_table(const nn::embedding_table& t, cuda_stream s) { return {}; }
  // the last backward's combined gradient (distinct ids in first-occurrence order, as nn's).
  virtual expected<void> download_sparse_grad(nn::sparse_grad& out, cuda_stream s);
};

// The device version of host layer `l` (after the host model's finish()), with its per-example
// input shapes and output shape. An embedding layer reads new rows from l.table() (its current
// row, or the deterministic init_row for ids it never saw).
expected<std::unique_ptr<device_layer>> make_device_layer(nn::layer& l, std::span<const nn::shape> in,
                                                          const nn::shape& out);

// The model's loss on device logits [n, width]: probabilities, per-example losses and their
// mean (*mean_loss, one float on the device); backward writes dL/dlogits of the mean loss.
expected<void> loss_forward(nn::loss_kind kind, const float* logits, const float* labels, std::size_t n,
                            std::size_t width, float* probs, float* example_loss, float* mean_loss,
                            cuda_stream s);
expected<void> loss_backward(nn::loss_kind kind, const float* probs, const float* labels, std::size_t n,
                             std::size_t width, float* grad_logits, cuda_stream s);

// nn's sgd / adagrad / adam on the device (same update rules, same slot layouts).
class device_optimizer {
 public:
  // bad_config / unknown_name errors as nn::make_optimizer; not_built without CUDA.
  static expected<std::unique_ptr<device_optimizer>> create(const nn::optimizer_config& c);
  virtual ~device_optimizer() = default;
  virtual std::size_t slots_per_element() const = 0;
  virtual float slot_init() const = 0;
  // n elements; slots slot-major (slots_per_element()*n floats); `step` as nn::optimizer::update.
  virtual expected<void> update_dense(float* value, const float* grad, float* slots, std::size_t n,
                                      std::uint64_t& step, cuda_stream s) const = 0;
  // Rows rows[u] (distinct) of table [*, dim] with gradients grad [count, dim]; each table row
  // has slots_per_element()*dim slot floats at slots[row * that] and an update counter steps[row].
  virtual expected<void> update_rows(float* table, float* slots, std::uint32_t* steps,
                                     const std::int32_t* rows, const float* grad, std::size_t count,
                                     std::size_t dim, cuda_stream s) const = 0;
  // The learning rate of the next updates, as a multiple of the configured one (trainer::apply_gradients).
  void set_lr_scale(double s) { lr_scale_ = s; }

 protected:
  double lr_scale_ = 1.0;
};

}  // namespace troupe::gpu
