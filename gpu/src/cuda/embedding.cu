#include "kernels.hpp"
#include "launch.cuh"

namespace troupe::gpu::kernels {
namespace {

__global__ void gather_rows_k(const float* __restrict__ table, const std::int32_t* __restrict__ rows,
                              float* __restrict__ out, std::size_t count, std::size_t dim) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t o = e / dim, k = e % dim;
    out[e] = table[static_cast<std::size_t>(rows[o]) * dim + k];
  }
}

__global__ void scatter_add_rows_k(const float* __restrict__ grad, const std::int32_t* __restrict__ slot,
                                   float* __restrict__ acc, std::size_t count, std::size_t dim) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t o = e / dim, k = e % dim;
    atomicAdd(acc + static_cast<std::size_t>(slot[o]) * dim + k, grad[e]);
  }
}

}  // namespace

cudaError_t gather_rows(const float* table, const std::int32_t* rows, float* out, std::size_t count,
                        std::size_t dim, cudaStream_t s) {
  return launch(gather_rows_k, count * dim, s, table, rows, out, count * dim, dim);
}
cudaError_t scatter_add_rows(const float* grad, const std::int32_t* slot, float* acc, std::size_t count,
                             std::size_t dim, cudaStream_t s) {
  return launch(scatter_add_rows_k, count * dim, s, grad, slot, acc, count * dim, dim);
}

}  // namespace troupe::gpu::kernels
