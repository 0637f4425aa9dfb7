// The allreduce strategy's device path: gradients summed on the GPU over NCCL, or host-staged over
// the CPU ring, for a backend with a device side (trainer_backend::device(), the CUDA backend).
#pragma once

#include <memory>

#include "troupe/actors/strategy.hpp"
#include "worker/goodput/controller.hpp"

namespace troupe::actors {

// `g` (its port and trainer) must outlive the strategy. `o`: the goodput controller's options (the
// CPU path's, built from [train]); `opt`: [train]'s optimizer (Adam's preconditions the noise
// scale's norms); `estimate`: [train] noise_scale. o.auto_batch is not supported (the job check
// refuses batch = "auto" with device "gpu") and is ignored.
std::unique_ptr<strategy> make_device_allreduce(gpu_replica& g, const goodput::controller_options& o,
                                                const nn::optimizer_config& opt, bool estimate);

}  // namespace troupe::actors
