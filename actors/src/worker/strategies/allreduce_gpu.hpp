// The allreduce strategy's device path: gradients summed on the GPU over NCCL, or host-staged over
// the CPU ring, for a backend with a device side (trainer_backend::device(), the CUDA backend).
#pragma once

#include <memory>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

// `g` (its port and trainer) must outlive the strategy.
std::unique_ptr<strategy> make_device_allreduce(gpu_replica& g);

}  // namespace troupe::actors
