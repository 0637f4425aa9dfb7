// The CUDA backend: a model replica on one GPU (gpu::device_trainer), with a native backend as its
// host mirror (what the PS, the ring's resynchronisation and evaluation read). It owns the device
// (ordinal = the worker's slot % device count), the trainer and its stream, the NCCL comm manager
// and a pinned staging buffer: the gpu_replica a strategy's device path uses (the allreduce
// strategy sums gradients over NCCL when every ring member has a GPU of its own, else host-staged
// over the CPU ring; strategies/allreduce_gpu.hpp, docs/gpu_workers.md).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "native_backend.hpp"
#include "troupe/gpu/comm_manager.hpp"
#include "troupe/gpu/cuda.hpp"
#include "troupe/gpu/norms.hpp"
#include "troupe/gpu/trainer.hpp"
#include "troupe/job/job_spec.hpp"
#include "troupe/wire/gpu_comm.hpp"

namespace troupe::wire {
class rpc_channel;
}

namespace troupe::actors {

class node_context;

// Moves of the gradient buffer between device and host, queued on the trainer's stream
// (gpu::detail's copies by default; the tests run the strategy on a host fake).
struct grad_ops {
  std::function<expected<void>(float* host, const float* dev, std::size_t n, gpu::cuda_stream)> to_host;
  std::function<expected<void>(float* dev, const float* host, std::size_t n, gpu::cuda_stream)> to_device;
  std::function<expected<void>(float* dev, std::size_t n, gpu::cuda_stream)> zero;
  // The gradient noise scale's squared norms (gpu::norm_reducer, made on first use): |x|^2, waiting
  // for the stream; x kept as the previous step's gradient (queued); |x|^2 (with_kept: and |kept|^2,
  // x.kept) queued with their readback, then read by queued_norms after a sync of the stream the
  // caller makes anyway (norm_reducer::queue / queued).
  std::function<expected<double>(const float* dev, std::size_t n, gpu::cuda_stream)> sqr_norm;
  std::function<expected<void>(const float* dev, std::size_t n, gpu::cuda_stream)> keep;
  std::function<expected<void>(const float* dev, std::size_t n, bool with_kept, gpu::cuda_stream)>
      queue_norms;
  std::function<gpu::norm_reducer::pair()> queued_norms;
  // From now on the three weigh n floats by Adam's preconditioner from its second moments v, each of
  // `tensors` floored at floor_fraction x its mean v (norm_reducer::precondition; queued).
  std::function<expected<void>(const float* v, std::size_t n, std::span<const std::size_t> tensors,
                               float inv_corr, float eps, float floor_fraction, gpu::cuda_stream)>
      precondition;
};
grad_ops device_grad_ops();

// How a rank learns the other ranks' devices and rank 0's unique id for a ring epoch: through
// the master in a worker (gpu_comm_exchange), in memory in the tests.
class gpu_rendezvous_port {
 public:
  virtual ~gpu_rendezvous_port() = default;
  // The complete snapshot of mine.ring_epoch (with the unique id when need_unique_id), bounded.
  virtual expected<wire::gpu_comm_info> exchange(const wire::gpu_comm_post& mine, bool need_unique_id) = 0;
};

struct gpu_replica {
  int ordinal = 0;
  gpu::device_info device;
  std::string host;
  std::string self;  // this node's name, in rendezvous posts
  std::unique_ptr<gpu::device_trainer> trainer;
  std::unique_ptr<gpu_rendezvous_port> port;
  gpu::comm_manager comms;
  gpu::pinned_buffer<float> pinned;  // owns `staging` in a real worker
  std::span<float> staging;          // host-staged allreduce: dense_count() gradients
  std::vector<std::size_t> tensors;  // the dense buffer's tensors' sizes (the host model's layout)
  grad_ops ops = device_grad_ops();
  // Aborted, not finalized: peers of the last ring may be gone.
  ~gpu_replica() { comms.abort(); }
};

// The device of the worker in slot `index` (node_identity::slot) among `count` devices.
inline int device_ordinal(std::size_t index, int count) {
  return count > 0 ? static_cast<int>(index % static_cast<std::size_t>(count)) : 0;
}

class cuda_backend final : public native_backend {
 public:
  // The host mirror `host` and a replica whose trainer mirrors it (tests pass a host fake).
  static expected<std::unique_ptr<cuda_backend>> wrap(std::unique_ptr<nn::model> host,
                                                      const nn::train_config& config,
                                                      std::unique_ptr<gpu_replica> g);

  std::string_view name() const override { return "cuda"; }
  std::string placement() const override { return "cuda:" + std::to_string(g_->ordinal); }
  expected<float> compute_gradients(const nn::batch& b) override { return g_->trainer->compute_gradients(b); }
  void apply_gradients(double lr_scale) override;
  expected<float> step(const nn::batch& b) override;
  expected<float> predict(const nn::batch& b) override;
  expected<void> to_host(host_copy what) override;
  expected<void> from_host(host_copy what) override;
  gpu_replica* device() override { return g_.get(); }

 private:
  cuda_backend(std::unique_ptr<nn::model> m, std::unique_ptr<nn::trainer> t, std::unique_ptr<gpu_replica> g);
  std::unique_ptr<gpu_replica> g_;
  bool device_ahead_ = false;  // the device's parameters moved since the host mirror was written
};

// A worker's CUDA backend ([train] device = "gpu"): its device, the trainer mirroring `host`, the
// comm manager and the rendezvous through the master over `rpc`. Errors name the reason: no
// device/driver, not built with CUDA, a model or strategy the GPU path does not support.
expected<std::unique_ptr<trainer_backend>> make_cuda_backend(node_context& rt, wire::rpc_channel& rpc,
                                                             std::unique_ptr<nn::model> host);

}  // namespace troupe::actors
