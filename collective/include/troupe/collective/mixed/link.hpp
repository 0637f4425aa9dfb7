// ring_link of a rank whose two neighbours are on different sides of a host boundary: one runs on
// this host (a shared-memory half, as in shm/link.hpp) and the other on another host (a TCP half,
// as in tcp/link.hpp). The halves speak their backend's protocol, so the neighbour on each side
// uses a plain shm_ring_link or tcp_ring_link (or a mixed link of its own) and one ring mixes both.
//
// exchange() progresses both halves at once (every rank sends and receives together; neither half
// waits for the other) and, with `accumulate`, adds each chunk as it arrives. Failures: the
// same-host neighbour's death through its pidfd and liveness beacon (peer_dead within a wait
// slice); the other's through its connection (closed: at once; cut off or hung: within
// heartbeat_timeout); a membership change (current_epoch) cancels a wait, the rendezvous included.
//
// Threads: one link is used by one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "troupe/collective/shm/link.hpp"
#include "troupe/collective/tcp/link.hpp"

namespace troupe::collective {

namespace shm_detail {
class peer_watch;
}

struct mixed_link_options {
  // The ring (job, epoch, rank, size), the per-exchange and rendezvous timeout, current_epoch, the
  // ring capacity and spare, and the same-host neighbour: prev_* when tcp_next, else next_*.
  shm_link_options shm;
  bool tcp_next = true;              // true: TCP to the next rank, shm from the previous
  std::string next_address;          // tcp_next: "host:port" of the next rank's listener
  tcp_listener* listener = nullptr;  // !tcp_next: where the previous rank dials in
  std::string secret;                // the job's token: both ends of the TCP half prove they hold it
  std::chrono::milliseconds heartbeat_timeout{3'000};
  std::size_t chunk_bytes = 256 << 10;  // TCP receive (and accumulate) granularity
};

// The TCP half's view of the ring: its epoch, rank, size, timeouts and clock from `o.shm`, the next
// rank's address, the job's token. An all-TCP link (no neighbour on this host) is made from it too.
tcp_link_options tcp_half_options(const mixed_link_options& o);

class mixed_ring_link final : public ring_link {
 public:
  // Makes this rank's half of each pair: creates its inbound ring and dials the next rank
  // (tcp_next), or opens the next rank's ring and accepts the previous rank on the listener.
  static expected<std::unique_ptr<mixed_ring_link>> connect(const mixed_link_options& options);
  ~mixed_ring_link() override;

  expected<void> exchange(const step_tag& tag, std::span<const float> send, std::span<float> recv,
                          bool accumulate) override;
  expected<void> send(const step_tag& tag, std::span<const float> data) override;
  expected<void> recv(const step_tag& tag, std::span<float> data) override;

 private:
  struct transfer_state;
  mixed_ring_link(mixed_link_options o, std::unique_ptr<transport::shm_ring> ring, int fd);
  expected<void> transfer(const step_tag& tag, const std::span<const float>* send, std::span<float>* recv,
                          bool accumulate);
  expected<bool> pump(transfer_state& t, const step_tag& tag);
  expected<void> check_stall(const step_tag& tag, troupe::clock::time_point deadline) const;
  void wait(const transfer_state& t) const;
  mixed_link_options opt_;
  std::unique_ptr<transport::shm_ring> ring_;      // tcp_next: this rank's inbound ring; else the next rank's
  int fd_ = -1;                                    // tcp_next: to the next rank; else from the previous
  std::unique_ptr<shm_detail::peer_watch> watch_;  // the same-host neighbour
  std::vector<float> staging_;
};

}  // namespace troupe::collective
