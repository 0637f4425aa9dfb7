// cuBLAS calls for row-major float matrices, errors naming the call.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "troupe/gpu/layers.hpp"

namespace troupe::gpu {

expected<void> cublas_check(cublasStatus_t rc, const char* call);

// Row-major C[m, n] = op(A) op(B) (+ beta C) with op(A) [m, k], op(B) [k, n]; a_t / b_t mean A is
// stored [k, m] / B is stored [n, k]. cuBLAS is column-major, so this computes C^T = op(B)^T op(A)^T.
expected<void> gemm_rm(cublas_handle h, bool a_t, bool b_t, std::size_t m, std::size_t n, std::size_t k,
                       const float* a, const float* b, float beta, float* c);

}  // namespace troupe::gpu
