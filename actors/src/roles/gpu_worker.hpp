// The GPU worker: the worker actor (worker.cpp's loop, tasks, progress and evaluation) whose
// replica lives on a device. It owns the device (ordinal = local worker index % device count), the
// device_trainer (and its stream), the NCCL comm manager and a pinned staging buffer; its strategy
// (gpu_worker_sync.cpp) sums gradients per step over NCCL when every ring member has a GPU of its
// own, else host-staged over the CPU ring (docs/gpu_workers.md).
#pragma once

#include <memory>
#include <string>

#include "troupe/gpu/comm_manager.hpp"
#include "troupe/gpu/cuda.hpp"
#include "troupe/gpu/trainer.hpp"
#include "worker_state.hpp"

namespace troupe::actors {

struct gpu_replica {
  int ordinal = 0;
  gpu::device_info device;
  std::string host;
  std::unique_ptr<gpu::device_trainer> trainer;
  gpu::comm_manager comms;
  gpu::pinned_buffer<float> staging;  // host-staged allreduce: dense_count() gradients
  // Aborted, not finalized: peers of the last ring may be gone.
  ~gpu_replica() { comms.abort(); }
};

// The device of the worker with local index `index` among `count` devices.
inline int device_ordinal(std::size_t index, int count) {
  return count > 0 ? static_cast<int>(index % static_cast<std::size_t>(count)) : 0;
}

// Sets up st.gpu (device, trainer, comm manager) and returns the device-backed allreduce. Errors
// name the reason: no device/driver, not built with CUDA, a model the GPU path does not support.
expected<std::unique_ptr<strategy>> make_gpu_worker_strategy(worker_state& st);
// The strategy alone, over an already set-up st.gpu (gpu_worker_sync.cpp).
std::unique_ptr<strategy> make_gpu_allreduce(worker_state& st);

}  // namespace troupe::actors
