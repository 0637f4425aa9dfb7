// Launchers of troupe's CUDA kernels. Each queues one kernel on `s` and returns the launch error
// (cudaGetLastError) or cudaSuccess; a count of 0 launches nothing. All tensors are row-major
// float32 in device memory; `n` is the batch size, counts are elements unless named otherwise.
// Shared by the .cu files (definitions) and the C++ layers (callers); CUDA runtime types only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::gpu::kernels {

// --- element-wise and small reductions (elementwise.cu) ---
cudaError_t fill(float* x, std::size_t count, float value, cudaStream_t s);
// y[i, j] += b[j] for y [n, units].
cudaError_t bias_add(float* y, const float* b, std::size_t n, std::size_t units, cudaStream_t s);
// db[j] = sum_i dy[i, j] (overwrites db).
cudaError_t bias_grad(const float* dy, float* db, std::size_t n, std::size_t units, cudaStream_t s);
cudaError_t relu_forward(const float* x, float* y, std::size_t count, cudaStream_t s);
// dx = dy where y > 0, else 0 (y is the forward output).
cudaError_t relu_backward(const float* y, const float* dy, float* dx, std::size_t count, cudaStream_t s);
cudaError_t sigmoid_forward(const float* x, float* y, std::size_t count, cudaStream_t s);
cudaError_t sigmoid_backward(const float* y, const float* dy, float* dx, std::size_t count, cudaStream_t s);
// The nn dropout mask: element i is kept (scaled by `scale`) iff troupe::splitmix64(base + i) >= threshold
// (core/splitmix.hpp, the same function as nn::dropout on the CPU).
cudaError_t dropout_forward(const float* x, float* y, float* mask, std::size_t count, std::uint64_t base,
                            std::uint64_t threshold, float scale, cudaStream_t s);
// out[i] = a[i] * b[i]
cudaError_t multiply(const float* a, const float* b, float* out, std::size_t count, cudaStream_t s);
// out[i] += in[i]
cudaError_t add_into(float* out, const float* in, std::size_t count, cudaStream_t s);
// y[b] = sum_i x[b, i] for x [n, w].
cudaError_t row_sum(const float* x, float* y, std::size_t n, std::size_t w, cudaStream_t s);
// dx[b, i] = g[b].
cudaError_t row_broadcast(const float* g, float* dx, std::size_t n, std::size_t w, cudaStream_t s);
// FM second order on v [n, f, k]: out[b] = 0.5 * sum_k ((sum_f v)^2 - sum_f v^2); keeps
// sum[b, k] = sum_f v[b, f, k] for backward.
cudaError_t fm_forward(const float* v, float* out, float* sum, std::size_t n, std::size_t f, std::size_t k,
                       cudaStream_t s);
// dv[b, f, k] = g[b] * (sum[b, k] - v[b, f, k]).
cudaError_t fm_backward(const float* v, const float* sum, const float* g, float* dv, std::size_t n,
                        std::size_t f, std::size_t k, cudaStream_t s);

// --- losses (loss.cu) ---
// probs = softmax rows of z [n, c]; loss[b] = logsumexp(z[b]) - z[b, labels[b]].
cudaError_t softmax_ce_forward(const float* z, const float* labels, float* probs, float* loss, std::size_t n,
                               std::size_t c, cudaStream_t s);
// grad = (probs - onehot(labels)) / n.
cudaError_t softmax_ce_backward(const float* probs, const float* labels, float* grad, std::size_t n,
                                std::size_t c, cudaStream_t s);
// probs = sigmoid(z) for z [n]; loss[b] = max(z,0) - z*y + log1p(exp(-|z|)).
cudaError_t bce_forward(const float* z, const float* labels, float* probs, float* loss, std::size_t n,
                        cudaStream_t s);
// grad = (probs - y) / n.
cudaError_t bce_backward(const float* probs, const float* labels, float* grad, std::size_t n, cudaStream_t s);
// *out = mean of x[0..n) (one block, summed in double).
cudaError_t mean(const float* x, float* out, std::size_t n, cudaStream_t s);

// --- squared norms (norms.cu), for the gradient noise scale ---
// Two passes, both deterministic (no atomics: the same vector gives the same bits, so every replica
// reads the same |mean g|^2 from the same summed gradient): at most norm_blocks blocks each sum
// their grid-stride share in double into `scratch`, then one block adds those in a fixed order and
// writes the float result(s) to `out` (device memory). `scratch`: norm_scratch doubles.
constexpr unsigned norm_blocks = 256;
constexpr std::size_t norm_scratch = 3 * norm_blocks;
// Each weighted by w[i] when w is not null (Adam's preconditioner, adam_weights).
// out[0] = sum_i x[i]^2 w[i].
cudaError_t sqr_norm(const float* x, const float* w, std::size_t n, double* scratch, float* out,
                     cudaStream_t s);
// out[0] = |a|_w^2, out[1] = |b|_w^2, out[2] = (a.b)_w.
cudaError_t pair_norms(const float* a, const float* b, const float* w, std::size_t n, double* scratch,
                       float* out, cudaStream_t s);
// out[0] = sum_i x[i] (the same two passes).
cudaError_t sum(const float* x, std::size_t n, double* scratch, float* out, cudaStream_t s);
// w[i] = 1 / (sqrt(max(v[i] inv_corr, floor)) + eps)^2: Adam's preconditioner from its second moments v
// at bias correction inv_corr = 1 / (1 - beta2^t), squared and inverted, with floor = floor_scale x
// *sum_v (sum_v: device memory, sum()'s out; null: no floor).
cudaError_t adam_weights(float* w, const float* v, std::size_t n, float inv_corr, float eps,
                         const float* sum_v, float floor_scale, cudaStream_t s);

// --- embeddings (embedding.cu) ---
// out[o, :] = table[rows[o], :] for `count` occurrences of rows of `dim` floats.
cudaError_t gather_rows(const float* table, const std::int32_t* rows, float* out, std::size_t count,
                        std::size_t dim, cudaStream_t s);
// acc[slot[o], :] += grad[o, :] (atomics: equal ids combine); acc is zeroed by the caller.
cudaError_t scatter_add_rows(const float* grad, const std::int32_t* slot, float* acc, std::size_t count,
                             std::size_t dim, cudaStream_t s);

// --- optimizers (optim.cu), the nn::optimizer update rules element for element ---
struct sgd_params {
  float lr, momentum, weight_decay;
  bool nesterov;
};
struct adagrad_params {
  float lr, epsilon, weight_decay;
};
struct adam_params {
  double lr, beta1, beta2;
  float epsilon, weight_decay;
};
// Dense: n elements, slots slot-major (slot j of element i at slots[j*n + i]).
cudaError_t sgd_dense(float* w, const float* g, float* slots, std::size_t n, sgd_params p, cudaStream_t s);
cudaError_t adagrad_dense(float* w, const float* g, float* slots, std::size_t n, adagrad_params p,
                          cudaStream_t s);
// `step` is the step number after incrementing (>= 1).
cudaError_t adam_dense(float* w, const float* g, float* slots, std::size_t n, std::uint64_t step,
                       adam_params p, cudaStream_t s);
// Sparse: rows[u] (distinct) of table [*, dim] get grad [count, dim]; row r's slots start at
// slots[r * width], slot j of element k at +j*dim+k; steps[r] is row r's update counter.
cudaError_t increment_steps(std::uint32_t* steps, const std::int32_t* rows, std::size_t count,
                            cudaStream_t s);
cudaError_t sgd_rows(float* table, float* slots, const std::int32_t* rows, const float* grad,
                     std::size_t count, std::size_t dim, sgd_params p, cudaStream_t s);
cudaError_t adagrad_rows(float* table, float* slots, const std::int32_t* rows, const float* grad,
                         std::size_t count, std::size_t dim, adagrad_params p, cudaStream_t s);
// Uses steps after increment_steps().
cudaError_t adam_rows(float* table, float* slots, const std::uint32_t* steps, const std::int32_t* rows,
                      const float* grad, std::size_t count, std::size_t dim, adam_params p, cudaStream_t s);

}  // namespace troupe::gpu::kernels
