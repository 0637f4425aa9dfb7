#include "kernels.hpp"
#include "launch.cuh"

namespace troupe::gpu::kernels {
namespace {

// One thread per row; the class count is small (10 for Fashion-MNIST).
__global__ void softmax_ce_fwd_k(const float* __restrict__ z, const float* __restrict__ labels,
                                 float* __restrict__ probs, float* __restrict__ loss, std::size_t n,
                                 std::size_t c) {
  TROUPE_GRID_STRIDE(b, n) {
    const float* zb = z + b * c;
    float* pb = probs + b * c;
    float m = zb[0];
    for (std::size_t j = 1; j < c; ++j) m = fmaxf(m, zb[j]);
    float s = 0;
    for (std::size_t j = 0; j < c; ++j) s += pb[j] = expf(zb[j] - m);
    const float inv = 1.0f / s;
    for (std::size_t j = 0; j < c; ++j) pb[j] *= inv;
    const auto y = static_cast<std::size_t>(labels[b]);
    loss[b] = static_cast<float>(static_cast<double>(m) + log(static_cast<double>(s)) - zb[y]);
  }
}

__global__ void softmax_ce_bwd_k(const float* __restrict__ probs, const float* __restrict__ labels,
                                 float* __restrict__ grad, std::size_t count, std::size_t c, float inv_n) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t b = e / c, j = e % c;
    const float hit = static_cast<std::size_t>(labels[b]) == j ? 1.0f : 0.0f;
    grad[e] = probs[e] * inv_n - hit * inv_n;
  }
}

__global__ void bce_fwd_k(const float* __restrict__ z, const float* __restrict__ labels,
                          float* __restrict__ probs, float* __restrict__ loss, std::size_t n) {
  TROUPE_GRID_STRIDE(b, n) {
    const float zb = z[b];
    probs[b] = 1.0f / (1.0f + expf(-zb));
    const double zd = zb, y = labels[b];
    loss[b] = static_cast<float>(fmax(zd, 0.0) - zd * y + log1p(exp(-fabs(zd))));
  }
}

__global__ void bce_bwd_k(const float* __restrict__ probs, const float* __restrict__ labels,
                          float* __restrict__ grad, std::size_t n, float inv_n) {
  TROUPE_GRID_STRIDE(b, n) grad[b] = (probs[b] - labels[b]) * inv_n;
}

__global__ void mean_k(const float* __restrict__ x, float* __restrict__ out, std::size_t n) {
  __shared__ double part[threads_per_block];
  double acc = 0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<float>(part[0] / static_cast<double>(n));
}

}  // namespace

cudaError_t softmax_ce_forward(const float* z, const float* labels, float* probs, float* loss, std::size_t n,
                               std::size_t c, cudaStream_t s) {
  return launch(softmax_ce_fwd_k, n, s, z, labels, probs, loss, n, c);
}
cudaError_t softmax_ce_backward(const float* probs, const float* labels, float* grad, std::size_t n,
                                std::size_t c, cudaStream_t s) {
  return launch(softmax_ce_bwd_k, n * c, s, probs, labels, grad, n * c, c, 1.0f / static_cast<float>(n));
}
cudaError_t bce_forward(const float* z, const float* labels, float* probs, float* loss, std::size_t n,
                        cudaStream_t s) {
  return launch(bce_fwd_k, n, s, z, labels, probs, loss, n);
}
cudaError_t bce_backward(const float* probs, const float* labels, float* grad, std::size_t n,
                         cudaStream_t s) {
  return launch(bce_bwd_k, n, s, probs, labels, grad, n, 1.0f / static_cast<float>(n));
}
cudaError_t mean(const float* x, float* out, std::size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return launch_one_block(mean_k, s, x, out, n);
}

}  // namespace troupe::gpu::kernels
