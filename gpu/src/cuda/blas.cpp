#include "blas.hpp"

#include "check.hpp"

namespace troupe::gpu {

expected<blas_handle> blas_handle::create(cuda_stream s) {
  cublasHandle_t h = nullptr;
  TROUPE_GPU_TRY(cublas_check(cublasCreate(&h), "cublasCreate"));
  blas_handle out(h);
  TROUPE_GPU_TRY(cublas_check(cublasSetStream(h, s), "cublasSetStream"));
  TROUPE_GPU_TRY(cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  return out;
}

blas_handle& blas_handle::operator=(blas_handle&& o) noexcept {
  if (this != &o) {
    if (h_) (void)cublasDestroy(h_);
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

blas_handle::~blas_handle() {
  if (h_) (void)cublasDestroy(h_);
}

expected<void> gemm_rm(cublas_handle h, bool a_t, bool b_t, std::size_t m, std::size_t n, std::size_t k,
                       const float* a, const float* b, float beta, float* c) {
  const float alpha = 1.0f;
  // Column-major view: C^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m]. Row-major X stored [r, c]
  // is column-major X^T with leading dimension c.
  const int lda = static_cast<int>(a_t ? m : k), ldb = static_cast<int>(b_t ? k : n);
  return cublas_check(cublasSgemm(h, b_t ? CUBLAS_OP_T : CUBLAS_OP_N, a_t ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                  ldb, a, lda, &beta, c, static_cast<int>(n)),
                      "cublasSgemm");
}

}  // namespace troupe::gpu
