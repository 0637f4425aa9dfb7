// The update rules of nn/src/optimizer.cpp, one thread per element.
#include <cmath>

#include "kernels.hpp"
#include "launch.cuh"

namespace troupe::gpu::kernels {
namespace {

__device__ inline void sgd_step(float& w, float g, float* s, const sgd_params& p) {
  if (p.momentum == 0.0f) {
    w -= p.lr * (g + p.weight_decay * w);
    return;
  }
  const float gi = g + p.weight_decay * w;
  *s = p.momentum * *s + gi;
  w -= p.nesterov ? p.lr * (gi + p.momentum * *s) : p.lr * *s;
}

__device__ inline void adagrad_step(float& w, float g, float* acc, const adagrad_params& p) {
  const float gi = g + p.weight_decay * w;
  *acc += gi * gi;
  w -= p.lr * gi / (sqrtf(*acc) + p.epsilon);
}

__device__ inline float adam_lr(const adam_params& p, std::uint64_t step) {
  const double t = static_cast<double>(step);
  return static_cast<float>(p.lr * sqrt(1 - pow(p.beta2, t)) / (1 - pow(p.beta1, t)));
}

__device__ inline void adam_step(float& w, float g, float* m, float* v, float lr_t, const adam_params& p) {
  const float b1 = static_cast<float>(p.beta1), b2 = static_cast<float>(p.beta2);
  const float gi = g + p.weight_decay * w;
  *m = b1 * *m + (1 - b1) * gi;
  *v = b2 * *v + (1 - b2) * gi * gi;
  w -= lr_t * *m / (sqrtf(*v) + p.epsilon);
}

__global__ void sgd_dense_k(float* w, const float* g, float* s, std::size_t n, sgd_params p) {
  TROUPE_GRID_STRIDE(i, n) sgd_step(w[i], g[i], s ? s + i : nullptr, p);
}

__global__ void adagrad_dense_k(float* w, const float* g, float* s, std::size_t n, adagrad_params p) {
  TROUPE_GRID_STRIDE(i, n) adagrad_step(w[i], g[i], s + i, p);
}

__global__ void adam_dense_k(float* w, const float* g, float* s, std::size_t n, float lr_t, adam_params p) {
  TROUPE_GRID_STRIDE(i, n) adam_step(w[i], g[i], s + i, s + n + i, lr_t, p);
}

__global__ void increment_steps_k(std::uint32_t* steps, const std::int32_t* rows, std::size_t count) {
  TROUPE_GRID_STRIDE(u, count) steps[rows[u]] += 1;
}

__global__ void sgd_rows_k(float* table, float* slots, const std::int32_t* rows, const float* grad,
                           std::size_t count, std::size_t dim, sgd_params p) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t r = static_cast<std::size_t>(rows[e / dim]), k = e % dim;
    sgd_step(table[r * dim + k], grad[e], slots ? slots + r * dim + k : nullptr, p);
  }
}

__global__ void adagrad_rows_k(float* table, float* slots, const std::int32_t* rows, const float* grad,
                               std::size_t count, std::size_t dim, adagrad_params p) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t r = static_cast<std::size_t>(rows[e / dim]), k = e % dim;
    adagrad_step(table[r * dim + k], grad[e], slots + r * dim + k, p);
  }
}

__global__ void adam_rows_k(float* table, float* slots, const std::uint32_t* steps, const std::int32_t* rows,
                            const float* grad, std::size_t count, std::size_t dim, adam_params p) {
  TROUPE_GRID_STRIDE(e, count) {
    const std::size_t r = static_cast<std::size_t>(rows[e / dim]), k = e % dim;
    float* base = slots + r * 2 * dim;
    adam_step(table[r * dim + k], grad[e], base + k, base + dim + k, adam_lr(p, steps[r]), p);
  }
}

}  // namespace

cudaError_t sgd_dense(float* w, const float* g, float* slots, std::size_t n, sgd_params p, cudaStream_t s) {
  return launch(sgd_dense_k, n, s, w, g, slots, n, p);
}
cudaError_t adagrad_dense(float* w, const float* g, float* slots, std::size_t n, adagrad_params p,
                          cudaStream_t s) {
  return launch(adagrad_dense_k, n, s, w, g, slots, n, p);
}
cudaError_t adam_dense(float* w, const float* g, float* slots, std::size_t n, std::uint64_t step,
                       adam_params p, cudaStream_t s) {
  // The same host arithmetic as nn's adam (double, then float).
  const double t = static_cast<double>(step);
  const float lr_t =
      static_cast<float>(p.lr * std::sqrt(1 - std::pow(p.beta2, t)) / (1 - std::pow(p.beta1, t)));
  return launch(adam_dense_k, n, s, w, g, slots, n, lr_t, p);
}
cudaError_t increment_steps(std::uint32_t* steps, const std::int32_t* rows, std::size_t count,
                            cudaStream_t s) {
  return launch(increment_steps_k, count, s, steps, rows, count);
}
cudaError_t sgd_rows(float* table, float* slots, const std::int32_t* rows, const float* grad,
                     std::size_t count, std::size_t dim, sgd_params p, cudaStream_t s) {
  return launch(sgd_rows_k, count * dim, s, table, slots, rows, grad, count * dim, dim, p);
}
cudaError_t adagrad_rows(float* table, float* slots, const std::int32_t* rows, const float* grad,
                         std::size_t count, std::size_t dim, adagrad_params p, cudaStream_t s) {
  return launch(adagrad_rows_k, count * dim, s, table, slots, rows, grad, count * dim, dim, p);
}
cudaError_t adam_rows(float* table, float* slots, const std::uint32_t* steps, const std::int32_t* rows,
                      const float* grad, std::size_t count, std::size_t dim, adam_params p, cudaStream_t s) {
  return launch(adam_rows_k, count * dim, s, table, slots, steps, rows, grad, count * dim, dim, p);
}

}  // namespace troupe::gpu::kernels
