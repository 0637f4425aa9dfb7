// Turning CUDA runtime / cuBLAS status codes into troupe errors that name the call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {

// Clears the runtime's sticky "last error" so that a later cudaGetLastError() does not report a
// failure that was already returned.
inline error cuda_error(cudaError_t rc, const std::string& call) {
  (void)cudaGetLastError();
  return error(gpu_errc::cuda_failed, call + ": " + cudaGetErrorString(rc));
}

inline expected<void> cuda_check(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return {};
  return cuda_error(rc, call);
}

// A kernels:: launcher's result (the launch error, or cudaSuccess).
inline expected<void> launched(cudaError_t rc, const char* kernel) {
  if (rc == cudaSuccess) return {};
  (void)cudaGetLastError();
  return error(gpu_errc::cuda_failed, std::string(kernel) + "<<<>>>: " + cudaGetErrorString(rc));
}

// Returns the error of an expected<...> from the enclosing function.
#define TROUPE_GPU_TRY(expr)                                                    \
  do {                                                                          \
    if (auto troupe_r_ = (expr); !troupe_r_) return std::move(troupe_r_).err(); \
  } while (0)

// No driver or no device: the reasons tests print when they skip.
inline bool is_no_device(cudaError_t rc) {
  return rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver || rc == cudaErrorInitializationError ||
         rc == cudaErrorCompatNotSupportedOnDevice || rc == cudaErrorSystemDriverMismatch ||
         rc == cudaErrorDevicesUnavailable;
}

}  // namespace troupe::gpu
