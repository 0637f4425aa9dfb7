#include "kernels.hpp"
#include "launch.cuh"
#include "troupe/core/splitmix.hpp"

namespace troupe::gpu::kernels {
namespace {

__global__ void fill_k(float* x, std::size_t count, float v) {
  TROUPE_GRID_STRIDE(i, count) x[i] = v;
}

__global__ void bias_add_k(float* __restrict__ y, const float* __restrict__ b, std::size_t count,
                           std::size_t units) {
  TROUPE_GRID_STRIDE(i, count) y[i] += b[i % units];
}

// One thread per column: consecutive threads read consecutive addresses of each row.
__global__ void bias_grad_k(const float* __restrict__ dy, float* __restrict__ db, std::size_t n,
                            std::size_t units) {
  TROUPE_GRID_STRIDE(j, units) {
    float acc = 0;
    for (std::size_t i = 0; i < n; ++i) acc += dy[i * units + j];
    db[j] = acc;
  }
}

__global__ void relu_fwd_k(const float* __restrict__ x, float* __restrict__ y, std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_bwd_k(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                           std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void sigmoid_fwd_k(const float* __restrict__ x, float* __restrict__ y, std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

__global__ void sigmoid_bwd_k(const float* __restrict__ y, const float* __restrict__ dy,
                              float* __restrict__ dx, std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

__global__ void dropout_fwd_k(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                              std::size_t count, std::uint64_t base, std::uint64_t threshold, float scale) {
  TROUPE_GRID_STRIDE(i, count) {
    const float m = splitmix64(base + i) >= threshold ? scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void multiply_k(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                           std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) out[i] = a[i] * b[i];
}

__global__ void add_into_k(float* __restrict__ out, const float* __restrict__ in, std::size_t count) {
  TROUPE_GRID_STRIDE(i, count) out[i] += in[i];
}

__global__ void row_sum_k(const float* __restrict__ x, float* __restrict__ y, std::size_t n, std::size_t w) {
  TROUPE_GRID_STRIDE(b, n) {
    float acc = 0;
    for (std::size_t i = 0; i < w; ++i) acc += x[b * w + i];
    y[b] = acc;
  }
}

__global__ void row_broadcast_k(const float* __restrict__ g, float* __restrict__ dx, std::size_t count,
                                std::size_t w) {
  TROUPE_GRID_STRIDE(i, count) dx[i] = g[i / w];
}

// One thread per example: f*k is small (tens of fields, embedding dims of 4..64).
__global__ void fm_fwd_k(const float* __restrict__ v, float* __restrict__ out, float* __restrict__ sum,
                         std::size_t n, std::size_t f, std::size_t k) {
  TROUPE_GRID_STRIDE(b, n) {
    const float* vb = v + b * f * k;
    float* s = sum + b * k;
    float sq = 0, s2 = 0;
    for (std::size_t j = 0; j < k; ++j) {
      float acc = 0;
      for (std::size_t i = 0; i < f; ++i) {
        const float x = vb[i * k + j];
        acc += x;
        sq += x * x;
      }
      s[j] = acc;
      s2 += acc * acc;
    }
    out[b] = 0.5f * (s2 - sq);
  }
}

__global__ void fm_bwd_k(const float* __restrict__ v, const float* __restrict__ sum,
                         const float* __restrict__ g, float* __restrict__ dv, std::size_t count,
                         std::size_t f, std::size_t k) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t b = e / (f * k), j = e % k;
    dv[e] = g[b] * (sum[b * k + j] - v[e]);
  }
}

}  // namespace

cudaError_t fill(float* x, std::size_t count, float value, cudaStream_t s) {
  return launch(fill_k, count, s, x, count, value);
}
cudaError_t bias_add(float* y, const float* b, std::size_t n, std::size_t units, cudaStream_t s) {
  return launch(bias_add_k, n * units, s, y, b, n * units, units);
}
cudaError_t bias_grad(const float* dy, float* db, std::size_t n, std::size_t units, cudaStream_t s) {
  return launch(bias_grad_k, units, s, dy, db, n, units);
}
cudaError_t relu_forward(const float* x, float* y, std::size_t count, cudaStream_t s) {
  return launch(relu_fwd_k, count, s, x, y, count);
}
cudaError_t relu_backward(const float* y, const float* dy, float* dx, std::size_t count, cudaStream_t s) {
  return launch(relu_bwd_k, count, s, y, dy, dx, count);
}
cudaError_t sigmoid_forward(const float* x, float* y, std::size_t count, cudaStream_t s) {
  return launch(sigmoid_fwd_k, count, s, x, y, count);
}
cudaError_t sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t count, cudaStream_t s) {
  return launch(sigmoid_bwd_k, count, s, y, dy, dx, count);
}
cudaError_t dropout_forward(const float* x, float* y, float* mask, std::size_t count, std::uint64_t base,
                            std::uint64_t threshold, float scale, cudaStream_t s) {
  return launch(dropout_fwd_k, count, s, x, y, mask, count, base, threshold, scale);
}
cudaError_t multiply(const float* a, const float* b, float* out, std::size_t count, cudaStream_t s) {
  return launch(multiply_k, count, s, a, b, out, count);
}
cudaError_t add_into(float* out, const float* in, std::size_t count, cudaStream_t s) {
  return launch(add_into_k, count, s, out, in, count);
}
cudaError_t row_sum(const float* x, float* y, std::size_t n, std::size_t w, cudaStream_t s) {
  return launch(row_sum_k, n, s, x, y, n, w);
}
cudaError_t row_broadcast(const float* g, float* dx, std::size_t n, std::size_t w, cudaStream_t s) {
  return launch(row_broadcast_k, n * w, s, g, dx, n * w, w);
}
cudaError_t fm_forward(const float* v, float* out, float* sum, std::size_t n, std::size_t f, std::size_t k,
                       cudaStream_t s) {
  return launch(fm_fwd_k, n, s, v, out, sum, n, f, k);
}
cudaError_t fm_backward(const float* v, const float* sum, const float* g, float* dv, std::size_t n,
                        std::size_t f, std::size_t k, cudaStream_t s) {
  return launch(fm_bwd_k, n * f * k, s, v, sum, g, dv, n * f * k, f, k);
}

}  // namespace troupe::gpu::kernels
