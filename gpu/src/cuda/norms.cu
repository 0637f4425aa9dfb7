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

// scratch[block] = this block's share of sum x^2 w (w null: 1).
__global__ void sqr_part_k(const float* __restrict__ x, const float* __restrict__ w, std::size_t n,
                           double* __restrict__ scratch) {
  __shared__ double part[threads_per_block];
  double acc = 0;
  TROUPE_GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += w ? v * v * w[i] : v * v;
  }
  part[threadIdx.x] = acc;
  block_sum(part);
  if (threadIdx.x == 0) scratch[blockIdx.x] = part[0];
}

// scratch[block] = this block's share of sum x.
__global__ void sum_part_k(const float* __restrict__ x, std::size_t n, double* __restrict__ scratch) {
  __shared__ double part[threads_per_block];
  double acc = 0;
  TROUPE_GRID_STRIDE(i, n) {
    acc += x[i];
  }
  part[threadIdx.x] = acc;
  block_sum(part);
  if (threadIdx.x == 0) scratch[blockIdx.x] = part[0];
}

// scratch[3 block + {0, 1, 2}] = this block's share of sum a^2 w, sum b^2 w, sum a b w (w null: 1).
__global__ void pair_part_k(const float* __restrict__ a, const float* __restrict__ b,
                            const float* __restrict__ w, std::size_t n, double* __restrict__ scratch) {
  __shared__ double part[3][threads_per_block];
  double aa = 0, bb = 0, ab = 0;
  TROUPE_GRID_STRIDE(i, n) {
    const double x = a[i], y = b[i], c = w ? w[i] : 1.0;
    aa += x * x * c;
    bb += y * y * c;
    ab += x * y * c;
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

// w = 1 / (sqrt(max(v c, floor)) + eps)^2 with floor = floor_scale x *sum_v (grad_norms.cpp's
// preconditioner_weights, in float as there; sum_v on the device: no readback).
__global__ void adam_weights_k(float* __restrict__ w, const float* __restrict__ v, std::size_t n, float c,
                               float eps, const float* __restrict__ sum_v, float floor_scale) {
  const float floor = sum_v ? floor_scale * *sum_v : 0.0f;
  TROUPE_GRID_STRIDE(i, n) {
    const float p = sqrtf(fmaxf(v[i] * c, floor)) + eps;
    w[i] = 1.0f / (p * p);
  }
}

unsigned norm_grid(std::size_t n) {
  return std::min(blocks_for(n), norm_blocks);
}

}  // namespace

cudaError_t sqr_norm(const float* x, const float* w, std::size_t n, double* scratch, float* out,
                     cudaStream_t s) {
  unsigned used = 0;
  if (n > 0)
    if (auto rc = launch_grid(sqr_part_k, norm_grid(n), used, s, x, w, n, scratch); rc != cudaSuccess)
      return rc;
  return launch_one_block(finish_k, s, static_cast<const double*>(scratch), used, 1u, out);
}

cudaError_t pair_norms(const float* a, const float* b, const float* w, std::size_t n, double* scratch,
                       float* out, cudaStream_t s) {
  unsigned used = 0;
  if (n > 0)
    if (auto rc = launch_grid(pair_part_k, norm_grid(n), used, s, a, b, w, n, scratch); rc != cudaSuccess)
      return rc;
  return launch_one_block(finish_k, s, static_cast<const double*>(scratch), used, 3u, out);
}

cudaError_t sum(const float* x, std::size_t n, double* scratch, float* out, cudaStream_t s) {
  unsigned used = 0;
  if (n > 0)
    if (auto rc = launch_grid(sum_part_k, norm_grid(n), used, s, x, n, scratch); rc != cudaSuccess) return rc;
  return launch_one_block(finish_k, s, static_cast<const double*>(scratch), used, 1u, out);
}

cudaError_t adam_weights(float* w, const float* v, std::size_t n, float inv_corr, float eps,
                         const float* sum_v, float floor_scale, cudaStream_t s) {
  return launch(adam_weights_k, n, s, w, v, n, inv_corr, eps, sum_v, floor_scale);
}

}  // namespace troupe::gpu::kernels
