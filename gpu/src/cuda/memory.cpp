// The untyped allocation and copy calls behind device_buffer and pinned_buffer.
#include <cuda_runtime.h>

#include "check.hpp"

namespace troupe::gpu::detail {

namespace {
std::string with_bytes(const char* call, std::size_t bytes) {
  return std::string(call) + "(" + std::to_string(bytes) + " bytes)";
}
}  // namespace

expected<void*> device_alloc(std::size_t bytes) {
  void* p = nullptr;
  cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc != cudaSuccess) return cuda_error(rc, with_bytes("cudaMalloc", bytes));
  return p;
}

void device_free(void* p) noexcept {
  if (p) (void)cudaFree(p);
}

expected<void*> host_alloc(std::size_t bytes) {
  void* p = nullptr;
  cudaError_t rc = cudaMallocHost(&p, bytes);
  if (rc != cudaSuccess) return cuda_error(rc, with_bytes("cudaMallocHost", bytes));
  return p;
}

void host_free(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}

namespace {
expected<void> copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cuda_stream s,
                    const char* what) {
  if (bytes == 0) return {};
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, s);
  if (rc != cudaSuccess) return cuda_error(rc, with_bytes(what, bytes));
  return {};
}
}  // namespace

expected<void> copy_to_device(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  return copy(dst, src, bytes, cudaMemcpyHostToDevice, s, "cudaMemcpyAsync host->device");
}

expected<void> copy_to_host(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  return copy(dst, src, bytes, cudaMemcpyDeviceToHost, s, "cudaMemcpyAsync device->host");
}

expected<void> copy_on_device(void* dst, const void* src, std::size_t bytes, cuda_stream s) {
  return copy(dst, src, bytes, cudaMemcpyDeviceToDevice, s, "cudaMemcpyAsync device->device");
}

expected<void> memset_device(void* dst, int value, std::size_t bytes, cuda_stream s) {
  if (bytes == 0) return {};
  cudaError_t rc = cudaMemsetAsync(dst, value, bytes, s);
  if (rc != cudaSuccess) return cuda_error(rc, with_bytes("cudaMemsetAsync", bytes));
  return {};
}

}  // namespace troupe::gpu::detail
