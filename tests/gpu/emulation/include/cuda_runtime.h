// Host emulation of the CUDA runtime subset troupe_gpu uses, for tests/gpu/emulation only:
// one "device" whose memory is host memory, streams and events that are always complete, copies
// that happen immediately. cudaMalloc over 1 TiB fails with "out of memory" (as a real device).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
struct CUstream_st {
  int dummy;
};
struct CUevent_st {
  int dummy;
};
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorNoDevice = 100,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInitializationError = 3,
  cudaErrorCompatNotSupportedOnDevice = 804,
  cudaErrorSystemDriverMismatch = 803,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNotReady = 600,
  cudaErrorMemoryAllocation = 2
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};
#define cudaStreamNonBlocking 1u
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u
struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  size_t totalGlobalMem;
  int major, minor;
};
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? "out of memory" : "emulated error";
}
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::strcpy(p->name, "emulated");
  std::memset(&p->uuid, 0xab, 16);
  p->totalGlobalMem = 1ull << 34;
  p->major = 9;
  p->minor = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetPCIBusId(char* b, int, int) {
  std::strcpy(b, "0000:00:00.0");
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) {
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0;
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t n) {
  if (n > (1ull << 40)) return cudaErrorMemoryAllocation;
  *p = std::malloc(n);
  std::memset(*p, 0xcd, n);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::malloc(n);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                                     cudaMemcpyKind, cudaStream_t) {
  for (size_t r = 0; r < h; ++r)
    std::memcpy(static_cast<char*>(d) + r * dp, static_cast<const char*>(s) + r * sp, w);
  return cudaSuccess;
}
