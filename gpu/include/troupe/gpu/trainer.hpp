// A model replica on one GPU: the device mirror of an nn::model (types lr, mlp, deepfm,
// wide_deep, and any graph of the layers layers.hpp supports) with its optimizer state.
//
// Step: compute_gradients(batch) (forward + backward on the device; returns the mean loss, which
// syncs the stream: the step's one sync, which what its hook queues rides), then optionally combine
// grads() across replicas, then apply_gradients(). Dense trainable parameters and their gradients
// are each ONE contiguous device buffer, in the host model's trainable-parameter order and sizes, so
// one allreduce covers a step. Embedding rows live in device tables (host-side id -> row map); their
// optimizer runs on touched rows.
//
// Threads: calls may come from any thread, one at a time; each selects the trainer's device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "troupe/gpu/cuda.hpp"
#include "troupe/nn/model.hpp"
#include "troupe/nn/trainer.hpp"

namespace troupe::gpu {

class device_trainer {
 public:
  // Mirrors host_model onto `device`, uploading its current parameters; optimizer from
  // config.optimizer. Errors: no_device / not_built, unsupported (names the layer), bad_config.
  // host_model must outlive the trainer (embedding rows are initialised from its tables).
  static expected<std::unique_ptr<device_trainer>> create(int device, nn::model& host_model,
                                                          const nn::train_config& config);
  virtual ~device_trainer() = default;

  // Forward (training) + backward of `b` on the device; returns the batch's mean loss.
  // Label or shape problems are nn bad_shape errors, as nn::model::forward. `queue_more`, when set,
  // is called once the backward is queued and before the loss is read back: what it queues on
  // stream() is done when this returns, without a sync of its own (the gradient noise scale's norms
  // of this step's gradient, read back with the loss). It reports its own errors.
  virtual expected<float> compute_gradients(const nn::batch& b, const std::function<void()>& queue_more) = 0;
  expected<float> compute_gradients(const nn::batch& b) { return compute_gradients(b, {}); }
  virtual float* params() = 0;  // device pointer, dense_count() floats
  virtual float* grads() = 0;   // device pointer, dense_count() floats
  virtual std::size_t dense_count() const = 0;
  // Optimizer step (queued): dense buffer, and the rows the last batch touched. A failure to
  // queue is kept and returned by the next sync() / compute_gradients().
  virtual void apply_gradients(double lr_scale = 1.0) = 0;
  // Device -> host: dense parameters and every embedding row the device has seen (synchronous).
  virtual expected<void> download(nn::model& m) = 0;
  // Host -> device: dense parameters and the device's embedding rows (optimizer state kept).
  virtual expected<void> upload(const nn::model& m) = 0;
  // The dense optimizer state: slot_count() floats (the optimizer's slots for every element of
  // params()) and its step counter. Replicas that synchronise parameters must synchronise these
  // too, or the same averaged gradient moves them apart (Adam's moments, momentum). Synchronous.
  virtual std::size_t slot_count() const = 0;
  virtual expected<void> download_optimizer(std::span<float> slots, std::uint64_t& step) = 0;
  virtual expected<void> upload_optimizer(std::span<const float> slots, std::uint64_t step) = 0;
  // Adam's second moments of params() (device, dense_count() floats) and the dense step: the
  // noise scale's preconditioner (docs/goodput.md). v is null with another optimizer.
  struct second_moments {
    const float* v = nullptr;
    std::uint64_t step = 0;
  };
  virtual second_moments adam_moments() const { return {}; }
  virtual cuda_stream stream() const = 0;
  virtual expected<void> sync() = 0;
  virtual int device() const = 0;
};

// One pass over `data` on `t`, as nn::trainer::train_epoch: the same shuffle for the same
// config.seed and `epoch` (0-based), batches of config.batch_size, progress every log_every
// steps. Returns the mean batch loss.
expected<double> train_epoch(device_trainer& t, const nn::dataset& data, const nn::train_config& config,
                             std::size_t epoch, const std::function<void(const nn::progress&)>& report = {});

}  // namespace troupe::gpu
