// Ring collectives for synchronous training. The algorithm (ring_allreduce) is written against
// `ring_link`, one rank's connection to its ring neighbours for one membership epoch. Each link
// backend is a folder of its own with the same file names: shm/link.hpp (shm_ring_link) joins ranks
// on one host over shared memory; tcp/link.hpp (tcp_ring_link) joins ranks on different hosts;
// mixed/link.hpp (mixed_ring_link) serves a rank with one neighbour of each kind, so the ring session
// (mixed/session.hpp) chooses the link per pair of neighbours. A new ring is built
// for every membership epoch; an operation interrupted by a membership change or a dead neighbour
// fails fast with collective_errc and the caller drops or retries the step on the next ring.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "troupe/core/error.hpp"

namespace troupe::collective {

enum class collective_errc {
  ok = 0,
  timeout = 1,    // a neighbour sent nothing before the deadline
  cancelled = 2,  // the membership epoch changed while the operation ran
  peer_dead = 3,  // a neighbour process is gone
  protocol = 4,   // a neighbour sent data for another epoch/op/step or of the wrong size
  setup = 5,      // the ring could not be built (rendezvous, shared memory)
};
const std::error_category& collective_category() noexcept;
inline std::error_code make_error_code(collective_errc e) noexcept {
  return {static_cast<int>(e), collective_category()};
}

// Identifies one exchange of one operation; both neighbours must agree on it.
struct step_tag {
  std::uint64_t epoch = 0;
  std::uint64_t op = 0;
  std::uint32_t step = 0;
};

class ring_link {
 public:
  virtual ~ring_link() = default;
  // Sends `send` to the next rank while receiving recv.size() floats from the previous rank into
  // `recv`, added to what is there when `accumulate`, else copied. `send` and `recv` must not
  // overlap. Returns when both are done, or fails (timeout, cancelled, peer_dead, protocol).
  virtual expected<void> exchange(const step_tag& tag, std::span<const float> send, std::span<float> recv,
                                  bool accumulate) = 0;
  // One direction only: `data` to the next rank (returns once it is handed over, which on a
  // buffered link may be before the next rank reads it), or recv.size() floats from the previous.
  virtual expected<void> send(const step_tag& tag, std::span<const float> data) = 0;
  virtual expected<void> recv(const step_tag& tag, std::span<float> data) = 0;
  // A sum-allreduce the link runs itself, with fewer copies than ring_allreduce's exchanges, or
  // nullopt when it has none for this call (ring_allreduce then exchanges). Every rank of a ring
  // answers alike for equal calls.
  virtual std::optional<expected<void>> own_allreduce(int rank, int size, std::span<float> data,
                                                      std::uint64_t epoch, std::uint64_t op) {
    return std::nullopt;
  }
};

// Sum-allreduce of `data` over the ring (reduce-scatter then allgather, 2(n-1) exchanges of
// data.size()/n floats each), or the link's own_allreduce where it has one. rank in [0, size); every rank
// passes the same size, epoch and op. On error the contents of `data` are unspecified.
expected<void> ring_allreduce(ring_link& link, int rank, int size, std::span<float> data, std::uint64_t epoch,
                              std::uint64_t op);
// ring_allreduce by exchanges only (a link's own_allreduce is not asked).
expected<void> ring_allreduce_exchanges(ring_link& link, int rank, int size, std::span<float> data,
                                        std::uint64_t epoch, std::uint64_t op);

// `root`'s `data` to every rank, passed along the ring (each rank receives it whole, then forwards
// it unless the next rank is the root). On a buffered link whose capacity holds `data`, the root
// returns as soon as it has written it: it does not wait for the others to read.
expected<void> ring_broadcast(ring_link& link, int rank, int size, std::span<float> data, int root,
                              std::uint64_t epoch, std::uint64_t op);

// Segment [begin, end) of rank-ordered partition of n elements into `parts` nearly equal pieces.
std::pair<std::size_t, std::size_t> segment_bounds(std::size_t n, int parts, int index);

}  // namespace troupe::collective

template <>
struct std::is_error_code_enum<troupe::collective::collective_errc> : std::true_type {};
