// A single-producer single-consumer byte ring in POSIX shared memory: the data channel between
// two ranks of a collective that run on the same machine (one copy in, one copy or reduction
// out, no kernel in between; gloo-style `transport/shm` next to TCP).
//
// Contract:
// - One process creates a ring (`create`), exactly one other opens it (`open`); after both have
//   mapped it the name is unlinked, so a killed process leaks no /dev/shm file once attached.
// - Calls are non-blocking: write_some/read_some move what fits and return the byte count; the
//   caller waits with wait_for_space/wait_for_data, which sleep on a futex after a short spin and
//   return early when the peer signals. A peer that dies never signals again: callers bound each
//   wait with a deadline and check the peer's liveness (see ring_link).
// - Thread safety: one writer thread and one reader thread at most.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "troupe/core/clock.hpp"
#include "troupe/core/error.hpp"

namespace troupe::transport {

enum class shm_errc {
  ok = 0,
  system_error = 1,  // shm_open/ftruncate/mmap failed (the message has errno's text)
  timeout = 2,       // the peer's ring did not appear in time
};
const std::error_category& shm_category() noexcept;
inline std::error_code make_error_code(shm_errc e) noexcept {
  return {static_cast<int>(e), shm_category()};
}

class shm_ring {
 public:
  struct header;

  // Creates the ring `name` (a /dev/shm name without the slash) with `capacity` bytes (rounded up to
  // a power of two). Fails if the name exists, or /dev/shm has no room for its pages (all reserved
  // with `populate`, else the header's: populate_some() reserves the rest). `populate`: its pages
  // are allocated now (and mapped, MAP_POPULATE), not faulted in one by one by the first writes.
  static expected<std::unique_ptr<shm_ring>> create(const std::string& name, std::size_t capacity,
                                                    bool populate = false);
  // Opens a ring created by a peer, waiting until `deadline` on `clk` while it does not exist yet
  // (woken by its name appearing in /dev/shm).
  static expected<std::unique_ptr<shm_ring>> open(const std::string& name, clock::time_point deadline,
                                                  clock& clk = clock::system());

  // Unlinks `name` if it exists (a ring left by a killed creator).
  static void remove(const std::string& name) noexcept;

  ~shm_ring();
  shm_ring(const shm_ring&) = delete;
  shm_ring& operator=(const shm_ring&) = delete;

  // Creator side, before anyone opened it: the ring goes by `name` from now on (rename(2) in
  // /dev/shm; the mapping stays). Lets a ring be made ahead of knowing the name it will serve under.
  expected<void> rename(const std::string& name);

  // Creator side: unlinks the name once the opener has attached (or at once if `force`). Idempotent.
  void unlink_when_attached(bool force = false);
  // Creator side: whether the peer has opened the ring (and mapped its pages).
  bool opened() const noexcept;
  // Creator side, before anyone opened it: allocates up to `max_bytes` more of the ring's pages (as
  // create(populate) does at once, a slice at a time); returns the bytes still unallocated, nullopt
  // when pages cannot be had (/dev/shm full): the ring must not be used then.
  std::optional<std::size_t> populate_some(std::size_t max_bytes) noexcept;

  std::size_t capacity() const noexcept { return capacity_; }
  // Bytes that can be written / read now.
  std::size_t writable() const noexcept;
  std::size_t readable() const noexcept;

  std::size_t write_some(std::span<const std::byte> data) noexcept;
  // Copies out up to out.size() bytes.
  std::size_t read_some(std::span<std::byte> out) noexcept;
  // The contiguous readable region (up to the wrap point), to reduce in place; then consume(n).
  std::span<const std::byte> peek() const noexcept;
  void consume(std::size_t n) noexcept;
  // The contiguous writable region (up to the wrap point), to write a result straight into; then
  // commit(n) publishes its first n bytes.
  std::span<std::byte> reserve() const noexcept;
  void commit(std::size_t n) noexcept;

  // Sleep until at least one byte can be written / read, or `timeout` passes. Returns true if so.
  bool wait_for_space(std::chrono::microseconds timeout) noexcept;
  bool wait_for_data(std::chrono::microseconds timeout) noexcept;

  const std::string& name() const noexcept { return name_; }

 private:
  shm_ring(std::string name, void* base, std::size_t mapped, bool creator);
  bool wait_on(std::uint32_t* word, bool want_space, std::chrono::microseconds timeout) noexcept;
  std::string name_;
  void* base_;
  std::size_t mapped_;
  header* hdr_;
  std::byte* data_;
  std::size_t capacity_;
  bool creator_;
  bool unlinked_ = false;
  std::size_t populated_ = 0;  // bytes of the data area populate_some() has allocated
};

}  // namespace troupe::transport

template <>
struct std::is_error_code_enum<troupe::transport::shm_errc> : std::true_type {};
