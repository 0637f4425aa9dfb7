// Launch geometry shared by the .cu files: grid-stride loops over up to 2^31 blocks' worth of
// elements, 256 threads per block.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace troupe::gpu::kernels {

constexpr unsigned threads_per_block = 256;

inline unsigned blocks_for(std::size_t count) {
  std::size_t b = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(b < 65535 ? (b ? b : 1) : 65535);
}

#define TROUPE_GRID_STRIDE(i, count)                                                                 \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x)

// Launches kernel<<<blocks_for(count), threads_per_block, 0, s>>>(args...) unless count is 0.
template <class Kernel, class... Args>
cudaError_t launch(Kernel kernel, std::size_t count, cudaStream_t s, Args... args) {
  if (count == 0) return cudaSuccess;
  kernel<<<blocks_for(count), threads_per_block, 0, s>>>(args...);
  return cudaGetLastError();
}

}  // namespace troupe::gpu::kernels
