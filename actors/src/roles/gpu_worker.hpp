// The GPU worker: the worker actor (worker.cpp's loop, tasks, progress and evaluation) whose
// replica lives on a device. It owns the device (ordinal = local worker index % device count), the
// device_trainer (and its stream), the NCCL comm manager and a pinned staging buffer; its strategy
// (gpu_worker_sync.cpp) sums gradients per step over NCCL when every ring member has a GPU of its
// own, else host-staged over the CPU ring (docs/gpu_workers.md).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "gpu_rendezvous.hpp"
#include "troupe/gpu/comm_manager.hpp"
#include "troupe/gpu/cuda.hpp"
#include "troupe/gpu/trainer.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

// Moves of the gradient buffer between device and host, queued on the trainer's stream
// (gpu::detail's copies by default; the tests run the strategy on a host fake).
struct grad_ops {
  std::function<expected<void>(float* host, const float* dev, std::size_t n, gpu::cuda_stream)> to_host;
  std::function<expected<void>(float* dev, const float* host, std::size_t n, gpu::cuda_stream)> to_device;
  std::function<expected<void>(float* dev, std::size_t n, gpu::cuda_stream)> zero;
};
grad_ops device_grad_ops();

struct gpu_replica {
  int ordinal = 0;
  gpu::device_info device;
  std::string host;
  std::unique_ptr<gpu::device_trainer> trainer;
  gpu::comm_manager comms;
  gpu::pinned_buffer<float> pinned;  // owns `staging` in a real worker
  std::span<float> staging;          // host-staged allreduce: dense_count() gradients
  grad_ops ops = device_grad_ops();
  // Aborted, not finalized: peers of the last ring may be gone.
  ~gpu_replica() { comms.abort(); }
};

// How a rank learns the other ranks' devices and rank 0's unique id for a ring epoch: through
// the master in a worker (gpu_comm_exchange), in memory in the tests.
class gpu_rendezvous_port {
 public:
  virtual ~gpu_rendezvous_port() = default;
  // The complete snapshot of mine.ring_epoch (with the unique id when need_unique_id), bounded.
  virtual expected<gpu_rendezvous::snapshot> exchange(const gpu_rendezvous::post& mine,
                                                      bool need_unique_id) = 0;
};

// The device of the worker in slot `index` (node_identity::slot) among `count` devices.
inline int device_ordinal(std::size_t index, int count) {
  return count > 0 ? static_cast<int>(index % static_cast<std::size_t>(count)) : 0;
}

// Sets up st.gpu (device, trainer, comm manager) and returns the device-backed allreduce. Errors
// name the reason: no device/driver, not built with CUDA, a model the GPU path does not support.
expected<std::unique_ptr<strategy>> make_gpu_worker_strategy(worker_state& st);
// The strategy alone (gpu_worker_sync.cpp): `g` must outlive it; `self` names this node in posts.
std::unique_ptr<strategy> make_gpu_allreduce(gpu_replica& g, std::string self,
                                             std::unique_ptr<gpu_rendezvous_port> port);

}  // namespace troupe::actors
