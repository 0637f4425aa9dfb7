// Device discovery and the RAII owners of cuda.hpp on the CUDA runtime.
#include <cuda_runtime.h>

#include <cstdio>

#include "check.hpp"

namespace troupe::gpu {

bool built_with_cuda() noexcept {
  return true;
}

expected<int> device_count() {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    auto code = is_no_device(rc) ? gpu_errc::no_device : gpu_errc::cuda_failed;
    return make_unexpected(code, std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc));
  }
  if (n <= 0) return make_unexpected(gpu_errc::no_device, "cudaGetDeviceCount: 0 devices");
  return n;
}

namespace {
expected<void> check_ordinal(int ordinal) {
  auto n = device_count();
  if (!n) return std::move(n).err();
  if (ordinal < 0 || ordinal >= *n) {
    return make_unexpected(gpu_errc::no_device, "device " + std::to_string(ordinal) + " requested, " +
                                                    std::to_string(*n) + " visible");
  }
  return {};
}

std::string format_uuid(const cudaUUID_t& u) {
  static const int groups[] = {4, 2, 2, 2, 6};
  std::string s = "GPU";
  int at = 0;
  char hex[3];
  for (int g : groups) {
    s += '-';
    for (int i = 0; i < g; ++i, ++at) {
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(u.bytes[at]));
      s += hex;
    }
  }
  return s;
}
}  // namespace

expected<device_info> describe(int ordinal) {
  if (auto ok = check_ordinal(ordinal); !ok) return std::move(ok).err();
  cudaDeviceProp prop{};
  if (auto ok = cuda_check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"); !ok) {
    return std::move(ok).err();
  }
  char bus[32] = {};
  if (auto ok = cuda_check(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal), "cudaDeviceGetPCIBusId"); !ok) {
    return std::move(ok).err();
  }
  device_info info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.uuid = format_uuid(prop.uuid);
  info.pci_bus_id = bus;
  info.total_memory = prop.totalGlobalMem;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  return info;
}

expected<void> set_device(int ordinal) {
  if (auto ok = check_ordinal(ordinal); !ok) return ok;
  return cuda_check(cudaSetDevice(ordinal), ("cudaSetDevice(" + std::to_string(ordinal) + ")").c_str());
}

expected<int> current_device() {
  int d = 0;
  if (auto ok = cuda_check(cudaGetDevice(&d), "cudaGetDevice"); !ok) return std::move(ok).err();
  return d;
}

expected<device_guard> device_guard::make(int ordinal) {
  auto prev = current_device();
  if (!prev) return std::move(prev).err();
  if (auto ok = set_device(ordinal); !ok) return std::move(ok).err();
  return device_guard(*prev);
}

device_guard::~device_guard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

expected<stream> stream::create() {
  cudaStream_t s = nullptr;
  if (auto ok = cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      !ok) {
    return std::move(ok).err();
  }
  return stream(s);
}

stream& stream::operator=(stream&& o) noexcept {
  if (this != &o) {
    if (s_) (void)cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

stream::~stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}

expected<void> sync_stream(cuda_stream s) {
  return cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

expected<void> stream::sync() {
  return cuda_check(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
}

expected<void> stream::wait(const event& e) {
  return cuda_check(cudaStreamWaitEvent(s_, e.get(), 0), "cudaStreamWaitEvent");
}

expected<event> event::create(bool timing) {
  cudaEvent_t e = nullptr;
  unsigned flags = timing ? cudaEventDefault : cudaEventDisableTiming;
  if (auto ok = cuda_check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags"); !ok) {
    return std::move(ok).err();
  }
  return event(e);
}

event& event::operator=(event&& o) noexcept {
  if (this != &o) {
    if (e_) (void)cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

event::~event() {
  if (e_) (void)cudaEventDestroy(e_);
}

expected<void> event::record(cuda_stream s) {
  return cuda_check(cudaEventRecord(e_, s), "cudaEventRecord");
}

expected<bool> event::query() const {
  cudaError_t rc = cudaEventQuery(e_);
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  return cuda_error(rc, "cudaEventQuery");
}

expected<void> event::sync() const {
  return cuda_check(cudaEventSynchronize(e_), "cudaEventSynchronize");
}

expected<float> event::elapsed_ms(const event& start, const event& end) {
  float ms = 0;
  if (auto ok = cuda_check(cudaEventElapsedTime(&ms, start.e_, end.e_), "cudaEventElapsedTime"); !ok) {
    return std::move(ok).err();
  }
  return ms;
}

}  // namespace troupe::gpu
