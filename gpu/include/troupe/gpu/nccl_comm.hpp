// NCCL communicators that cannot hang their owner. NCCL has no timeouts of its own: every call
// here runs the communicator in nonblocking mode (config.blocking = 0) and polls it
// (ncclCommGetAsyncError, cudaStreamQuery) under a watchdog; on an error or past the deadline the
// communicator is aborted and the call returns gpu_errc::peer_lost / timeout / nccl_failed. Once a
// communicator has been aborted on one rank, every rank must abort it too (NCCL's rule): an
// aborted nccl_comm stays unhealthy and is only released.
//
// Without CUDA (TROUPE_HAVE_CUDA off) every entry point returns gpu_errc::not_built.
// Threads: one owner thread per communicator. The device current on the calling thread at init()
// is the communicator's device; later calls must run with that device current.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "troupe/core/clock.hpp"
#include "troupe/gpu/cuda.hpp"

struct ncclComm;

namespace troupe::gpu {

// ncclUniqueId: 128 opaque bytes, made by rank 0 and handed to every rank (through the master).
struct nccl_unique_id {
  static constexpr std::size_t size = 128;
  std::array<unsigned char, size> bytes{};

  // ncclGetUniqueId (opens rank 0's bootstrap listener).
  static expected<nccl_unique_id> create();
  // Exactly `size` bytes, else core_errc::invalid_argument naming the length.
  static expected<nccl_unique_id> from_bytes(std::string_view b);
  std::string to_bytes() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
  bool operator==(const nccl_unique_id&) const = default;
};

struct nccl_options {
  std::chrono::milliseconds init_timeout{30'000};  // communicator creation (every rank must join)
  std::chrono::milliseconds op_timeout{30'000};    // one collective, from enqueue to completion
  std::chrono::microseconds poll{200};             // between polls of the async state
  // comm_manager: retired communicators whose aborts may run at once, each on a thread of its own
  // (an abort took ~0.5 s on an H100 and H200). A rebuild past this many waits for the oldest.
  // 32: 100 back-to-back changes on an H200 took a p90 of 63.5 ms each (16: 96.1 ms; 8: 235 ms).
  int aborts_in_flight = 32;
  // The watchdog's deadlines and the pauses between polls are on it (a manual clock in tests: each
  // pause advances it).
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

class nccl_comm {
 public:
  // Creates this rank's communicator on the current device and waits (polling) until every rank
  // has joined. On failure or timeout the half-made communicator is aborted.
  static expected<nccl_comm> init(const nccl_unique_id& id, int nranks, int rank, const nccl_options& o = {});

  nccl_comm() = default;
  nccl_comm(nccl_comm&& o) noexcept
      : comm_(std::exchange(o.comm_, nullptr)),
        rank_(o.rank_),
        size_(o.size_),
        opt_(o.opt_),
        broken_(o.broken_) {}
  nccl_comm& operator=(nccl_comm&& o) noexcept;
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  // Healthy: finalize + destroy (bounded by op_timeout, aborted past it); otherwise abort.
  ~nccl_comm();

  // Sum over the ranks, in place on the device: each rank's `data` is multiplied by `scale` first
  // (ncclRedOpCreatePreMulSum; 1 is a plain sum). Queued on `s`, then waited for: returns once the
  // stream has finished it (or the watchdog aborted the communicator).
  expected<void> allreduce_sum(float* data, std::size_t n, cuda_stream s, float scale = 1.0f);
  // Root's `data` to every rank, in place, waited for like allreduce_sum.
  expected<void> broadcast(float* data, std::size_t n, int root, cuda_stream s);

  // Aborts the communicator now (peers' collectives then fail); idempotent, never throws.
  void abort() noexcept;
  // Releases it: finalize (polled, bounded) + destroy when healthy, abort otherwise.
  expected<void> destroy();

  bool valid() const noexcept { return comm_ != nullptr; }
  bool healthy() const noexcept { return comm_ != nullptr && !broken_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  ncclComm* comm_ = nullptr;
  int rank_ = 0, size_ = 0;
  nccl_options opt_;
  bool broken_ = false;
};

// Free and total memory of the current device (cudaMemGetInfo), for leak checks.
struct device_memory {
  std::size_t free = 0, total = 0;
};
expected<device_memory> memory_info();

}  // namespace troupe::gpu
