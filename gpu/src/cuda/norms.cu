#include <algorithm>

#include "kernels.hpp"
#include "launch.cuh"

namespace troupe::gpu::kernels {
namespace {

// Sums part[threadIdx.x] over the block into part[0] (blockDim.x a power of two).
__device__ void block_sum(double* part) {
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
}

// scratch[block] = this block's share of sum x^2.
__global__ void sqr_part_k(const float* __restrict__ x, std::size_t n, double* __restrict__ scratch) {
  __shared__ double part[threads_per_block];
  double acc = 0;
  TROUPE_GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  block_sum(part);
  if (threadIdx.x == 0) scratch[blockIdx.x] = part[0];
}

// scratch[3 block + {0, 1, 2}] = this block's share of sum a^2, sum b^2, sum a b.
__global__ void pair_part_k(const float* __restrict__ a, const float* __restrict__ b, std::size_t n,
                            double* __restrict__ scratch) {
  __shared__ double part[3][threads_per_block];
  double aa = 0, bb = 0, ab = 0;
  TROUPE_GRID_STRIDE(i, n) {
    const double x = a[i], y = b[i];
    aa += x * x;
    bb += y * y;
    ab += x * y;
  }
  part[0][threadIdx.x] = aa;
  part[1][threadIdx.x] = bb;
  part[2][threadIdx.x] = ab;
  block_sum(part[0]);
  block_sum(part[1]);
  block_sum(part[2]);
  if (threadIdx.x == 0)
    for (unsigned k = 0; k < 3; ++k) scratch[3 * blockIdx.x + k] = part[k][0];
}

// out[k] = sum over the `blocks` partial results of column k of `width` (one block, fixed order).
__global__ void finish_k(const double* __restrict__ scratch, unsigned blocks, unsigned width,
                         float* __restrict__ out) {
  __shared__ double part[threads_per_block];
  for (unsigned k = 0; k < width; ++k) {
    double acc = 0;
    for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) acc += scratch[i * width + k];
    part[threadIdx.x] = acc;
    block_sum(part);
    if (threadIdx.x == 0) out[k] = static_cast<float>(part[0]);
    __syncthreads();  // part[0] read before the next column overwrites it
  }
}

unsigned norm_grid(std::size_t n) {
  return std::min(blocks_for(n), norm_blocks);
}

}  // namespace

cudaError_t sqr_norm(const float* x, std::size_t n, double* scratch, float* out, cudaStream_t s) {
  unsigned used = 0;
  if (n > 0)
    if (auto rc = launch_grid(sqr_part_k, norm_grid(n), used, s, x, n, scratch); rc != cudaSuccess) return rc;
  return launch_one_block(finish_k, s, static_cast<const double*>(scratch), used, 1u, out);
}

cudaError_t pair_norms(const float* a, const float* b, std::size_t n, double* scratch, float* out,
                       cudaStream_t s) {
  unsigned used = 0;
  if (n > 0)
    if (auto rc = launch_grid(pair_part_k, norm_grid(n), used, s, a, b, n, scratch); rc != cudaSuccess)
      return rc;
  return launch_one_block(finish_k, s, static_cast<const double*>(scratch), used, 3u, out);
}

}  // namespace troupe::gpu::kernels
