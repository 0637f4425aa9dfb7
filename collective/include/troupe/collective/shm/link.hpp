// ring_link between ranks on one machine, over two shared-memory rings: the one this rank creates
// (written by the previous rank) and the next rank's (written by this one). Ring names carry the
// job, epoch and rank, so rings of different epochs never mix.
#pragma once

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "troupe/collective/liveness.hpp"
#include "troupe/collective/ring.hpp"
#include "troupe/core/ids.hpp"

namespace troupe::transport {
class shm_ring;
}

namespace troupe::collective {

namespace shm_detail {
class peer_watch;
}

struct shm_link_options {
  std::string job;          // job id (part of the ring names)
  std::uint64_t epoch = 0;  // membership epoch of this ring
  int rank = 0, size = 1;
  pid_t prev_pid = 0, next_pid = 0;           // neighbours' pids, watched while waiting (0: not watched)
  std::size_t capacity = 4 << 20;             // bytes per ring
  std::chrono::milliseconds timeout{10'000};  // per exchange, and for the rendezvous
  // When set and different from `epoch`, operations fail with `cancelled` (membership changed).
  const std::atomic<std::uint64_t>* current_epoch = nullptr;
  // When set: the neighbours' liveness (liveness.hpp), a faster death notice than their pids. Used
  // during connect() and, for the watches it opens, while the link lives.
  liveness* live = nullptr;
  node_id prev_node{}, next_node{};
  // A ring made ahead (populated, of `capacity`) that becomes this rank's inbound ring instead of a
  // fresh one; taken (reset) when used. A joining worker's first ring then takes no page faults
  // while a partner writes the replicas' state into it.
  std::unique_ptr<transport::shm_ring>* spare = nullptr;
};

class shm_ring_link final : public ring_link {
 public:
  // Creates this rank's inbound ring and opens the next rank's (waiting up to options.timeout).
  static expected<std::unique_ptr<shm_ring_link>> connect(const shm_link_options& options);
  ~shm_ring_link() override;

  expected<void> exchange(const step_tag& tag, std::span<const float> send, std::span<float> recv,
                          bool accumulate) override;
  expected<void> send(const step_tag& tag, std::span<const float> data) override;
  expected<void> recv(const step_tag& tag, std::span<float> data) override;

  static std::string ring_name(const std::string& job, std::uint64_t epoch, int rank);
  // Whether the previous rank has opened this rank's inbound ring (it is done linking).
  bool prev_linked() const noexcept;
  // Whether `rank`'s inbound ring of `epoch` exists (that rank is linking, or linked and its
  // neighbour not attached yet).
  static bool ring_exists(const std::string& job, std::uint64_t epoch, int rank);

 private:
  shm_ring_link(shm_link_options o, std::unique_ptr<transport::shm_ring> in,
                std::unique_ptr<transport::shm_ring> out);
  expected<void> check_stall(const step_tag& tag, std::chrono::steady_clock::time_point deadline,
                             std::chrono::steady_clock::time_point& next_probe) const;
  // A neighbour that has exited (a zombie included); pidfds make this one cheap poll(2), so it runs
  // at every stall: a SIGKILLed neighbour ends a wait within one wait slice.
  bool neighbour_dead(pid_t& which) const;
  expected<void> transfer(const step_tag& tag, const std::span<const float>* send, std::span<float>* recv,
                          bool accumulate);
  shm_link_options opt_;
  std::unique_ptr<transport::shm_ring> in_, out_;
  std::unique_ptr<shm_detail::peer_watch> watch_[2];  // prev, next (next null when it is prev)
};

}  // namespace troupe::collective
