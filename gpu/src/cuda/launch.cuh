// Launch geometry shared by the .cu files: grid-stride loops, 256 threads per block.
//
// With TROUPE_GPU_EMULATION defined (tests/gpu/emulation only) the same kernels compile as plain
// C++ for the host: a launch runs the whole grid-stride loop in one "thread", atomics are plain
// adds. That build checks the kernels' arithmetic and the layers' and trainer's host logic on
// machines without a GPU; it cannot find races or launch-configuration errors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#ifdef TROUPE_GPU_EMULATION
#include <algorithm>
#include <cmath>
#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict
struct troupe_emulated_dim {
  unsigned x;
};
inline troupe_emulated_dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
inline void __syncthreads() {}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p += v;
  return old;
}
inline float fmaxf(float a, float b) {
  return std::max(a, b);
}
using std::exp, std::fabs, std::fmax, std::log, std::log1p, std::pow, std::sqrt;
#endif

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
#ifdef TROUPE_GPU_EMULATION
  (void)s;
  kernel(args...);
  return cudaSuccess;
#else
  // clang-format off
  kernel<<<blocks_for(count), threads_per_block, 0, s>>>(args...);
  // clang-format on
  return cudaGetLastError();
#endif
}

// Launches kernel<<<1, threads_per_block, 0, s>>>(args...) (block-wide reductions).
template <class Kernel, class... Args>
cudaError_t launch_one_block(Kernel kernel, cudaStream_t s, Args... args) {
#ifdef TROUPE_GPU_EMULATION
  (void)s;
  kernel(args...);
  return cudaSuccess;
#else
  // clang-format off
  kernel<<<1, threads_per_block, 0, s>>>(args...);
  // clang-format on
  return cudaGetLastError();
#endif
}

// Launches kernel<<<blocks, threads_per_block, 0, s>>>(args...) and sets `used` to the grid's
// blocks: 1 in the emulation, whose one "thread" runs the whole grid-stride loop (a two-pass
// reduction reads `used` partial results).
template <class Kernel, class... Args>
cudaError_t launch_grid(Kernel kernel, unsigned blocks, unsigned& used, cudaStream_t s, Args... args) {
#ifdef TROUPE_GPU_EMULATION
  (void)s;
  (void)blocks;
  used = 1;
  kernel(args...);
  return cudaSuccess;
#else
  used = blocks;
  // clang-format off
  kernel<<<blocks, threads_per_block, 0, s>>>(args...);
  // clang-format on
  return cudaGetLastError();
#endif
}

}  // namespace troupe::gpu::kernels
