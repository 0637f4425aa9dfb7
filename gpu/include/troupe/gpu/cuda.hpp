// The CUDA runtime behind troupe's error model: device discovery and selection, and RAII owners
// for streams, events, device buffers and pinned host buffers.
//
// This header does not include cuda_runtime.h; CUDA handle types are forward-declared, so any
// module may include it. On a build without CUDA (TROUPE_HAVE_CUDA off) every entry point returns
// gpu_errc::not_built; on a machine without a driver or device, device_count() returns no_device
// with the runtime's reason (tests print it when they skip). Every failing CUDA call becomes an
// error naming the call: "gpu: cuda call failed: cudaMalloc(4194304 bytes): out of memory".
//
// Threads: the owners are not thread-safe; a stream's work is ordered, copies are asynchronous
// with respect to the host unless stated otherwise.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "troupe/core/error.hpp"

struct CUstream_st;
struct CUevent_st;

namespace troupe::gpu {

using cuda_stream = CUstream_st*;
using cuda_event = CUevent_st*;

enum class gpu_errc {
  ok = 0,
  no_device = 1,  // no driver, no device, or an ordinal past the device count
  cuda_failed,    // a CUDA runtime call failed (the context names it)
  cublas_failed,  // a cuBLAS call failed
  nccl_failed,    // an NCCL call failed
  timeout,        // a collective or a sync did not finish in time
  peer_lost,      // a rank of a communicator went away
  unsupported,    // a model/layer/option the GPU path does not implement (context names it)
  not_built,      // troupe was built without CUDA
};

const std::error_category& gpu_category() noexcept;
inline std::error_code make_error_code(gpu_errc e) noexcept {
  return {static_cast<int>(e), gpu_category()};
}

// True when this build has the CUDA sources (says nothing about a device being present).
bool built_with_cuda() noexcept;
// Opens the libraries troupe loads on first use rather than at start-up (cuBLAS), so that a missing
// or mismatched one is reported up front. Needs no device. not_built without CUDA.
expected<void> load_libraries();

// The number of visible devices (>= 1), or no_device / not_built with the reason.
expected<int> device_count();

struct device_info {
  int ordinal = 0;
  std::string name;
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-..."
  std::string pci_bus_id;  // "0000:3b:00.0"
  std::size_t total_memory = 0;
  int compute_major = 0;
  int compute_minor = 0;
};
expected<device_info> describe(int ordinal);
// One line per device, for logs and `troupe` diagnostics ("0: NVIDIA H100 (80 GiB, sm_90)").
expected<std::string> describe_all();

// Makes `ordinal` the calling thread's current device (checked against device_count()).
expected<void> set_device(int ordinal);
expected<int> current_device();

// Selects a device for a scope and restores the previous one on destruction.
class device_guard {
 public:
  static expected<device_guard> make(int ordinal);
  device_guard(device_guard&& o) noexcept : previous_(std::exchange(o.previous_, -1)) {}
  device_guard& operator=(device_guard&&) = delete;
  device_guard(const device_guard&) = delete;
  ~device_guard();

 private:
  explicit device_guard(int previous) : previous_(previous) {}
  int previous_ = -1;
};

class event;

// A non-blocking CUDA stream on the device current at create(). Move-only.
class stream {
 public:
  static expected<stream> create();
  stream() = default;
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream& operator=(stream&& o) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream();

  cuda_stream get() const noexcept { return s_; }
  explicit operator bool() const noexcept { return s_ != nullptr; }
  // Blocks until all work queued so far has finished; reports asynchronous kernel errors too.
  expected<void> sync();
  // Makes later work on this stream wait for `e` (recorded on any stream).
  expected<void> wait(const event& e);

 private:
  explicit stream(cuda_stream s) : s_(s) {}
  cuda_stream s_ = nullptr;
};

// A CUDA event; with timing it can measure elapsed time between two records. Move-only.
class event {
 public:
  static expected<event> create(bool timing = false);
  event() = default;
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept;
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event();

  cuda_event get() const noexcept { return e_; }
  expected<void> record(cuda_stream s);
  expected<void> record(const stream& s) { return record(s.get()); }
  // true once the work before the last record() has finished.
  expected<bool> query() const;
  expected<void> sync() const;
  // Milliseconds between `start` and `end` (both created with timing, both completed).
  static expected<float> elapsed_ms(const event& start, const event& end);

 private:
  explicit event(cuda_event e) : e_(e) {}
  cuda_event e_ = nullptr;
};

// Blocks until the work queued on `s` (a stream owned elsewhere) has finished.
expected<void> sync_stream(cuda_stream s);

// Untyped runtime calls the buffer templates use. Sizes are in bytes.
namespace detail {
expected<void*> device_alloc(std::size_t bytes);
void device_free(void* p) noexcept;
expected<void*> host_alloc(std::size_t bytes);  // page-locked
void host_free(void* p) noexcept;
expected<void> copy_to_device(void* dst, const void* src, std::size_t bytes, cuda_stream s);
expected<void> copy_to_host(void* dst, const void* src, std::size_t bytes, cuda_stream s);
expected<void> copy_on_device(void* dst, const void* src, std::size_t bytes, cuda_stream s);
expected<void> memset_device(void* dst, int value, std::size_t bytes, cuda_stream s);
error size_mismatch(const char* what, std::size_t have, std::size_t want);
}  // namespace detail

// `n` elements of T in device memory, uninitialised after alloc(). Move-only; alloc(0) gives an
// empty buffer without touching the runtime.
template <class T>
class device_buffer {
 public:
  static expected<device_buffer> alloc(std::size_t n) {
    if (n == 0) return device_buffer();
    auto p = detail::device_alloc(n * sizeof(T));
    if (!p) return std::move(p).err();
    return device_buffer(static_cast<T*>(*p), n);
  }
  device_buffer() = default;
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      detail::device_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { detail::device_free(data_); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }

  // Host -> device, queued on `s`: `src` must stay alive and unchanged until `s` reaches the copy
  // (sync the stream, or use a pinned_buffer that outlives it). src.size() must equal size().
  expected<void> upload(std::span<const T> src, cuda_stream s) {
    if (src.size() != size_) return detail::size_mismatch("device_buffer::upload", src.size(), size_);
    return detail::copy_to_device(data_, src.data(), bytes(), s);
  }
  // Device -> host, queued on `s`: `dst` is valid after the stream is synced.
  expected<void> download(std::span<T> dst, cuda_stream s) const {
    if (dst.size() != size_) return detail::size_mismatch("device_buffer::download", dst.size(), size_);
    return detail::copy_to_host(dst.data(), data_, bytes(), s);
  }
  expected<void> zero(cuda_stream s) { return detail::memset_device(data_, 0, bytes(), s); }

 private:
  device_buffer(T* p, std::size_t n) : data_(p), size_(n) {}
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// `n` elements of T in page-locked host memory (fast, truly asynchronous copies). Move-only.
template <class T>
class pinned_buffer {
 public:
  static expected<pinned_buffer> alloc(std::size_t n) {
    if (n == 0) return pinned_buffer();
    auto p = detail::host_alloc(n * sizeof(T));
    if (!p) return std::move(p).err();
    return pinned_buffer(static_cast<T*>(*p), n);
  }
  pinned_buffer() = default;
  pinned_buffer(pinned_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      detail::host_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { detail::host_free(data_); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

 private:
  pinned_buffer(T* p, std::size_t n) : data_(p), size_(n) {}
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace troupe::gpu

template <>
struct std::is_error_code_enum<troupe::gpu::gpu_errc> : std::true_type {};
