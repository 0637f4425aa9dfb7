// Host emulation of the cuBLAS subset troupe_gpu uses (tests/gpu/emulation only): a reference
// column-major sgemm accumulating in double.
#pragma once
#include "cuda_runtime.h"
struct cublasContext {
  cudaStream_t s;
};
typedef cublasContext* cublasHandle_t;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasMath_t { CUBLAS_DEFAULT_MATH };
inline const char* cublasGetStatusString(cublasStatus_t) {
  return "emulated";
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) {
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
      C[i + j * ldc] = *alpha * s + (*beta == 0 ? 0 : *beta * C[i + j * ldc]);
    }
  return CUBLAS_STATUS_SUCCESS;
}
