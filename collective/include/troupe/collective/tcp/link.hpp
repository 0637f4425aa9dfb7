// ring_link between ranks on different hosts, over two TCP connections: one this rank accepts
// (from the previous rank, which writes to it) and one it dials (to the next rank). Every message
// is a 28-byte header (epoch, op, step, payload bytes) and the payload; exchange() sends and
// receives at once on non-blocking sockets, and with `accumulate` adds each received chunk as soon
// as it is in, so the reduction overlaps the wire. From `send_thread_bytes` up, an exchange writes
// its outgoing half on the link's own thread while the caller's thread reads and adds, so sending,
// receiving and reducing use two cores.
//
// Death and partitions: a neighbour that exits closes its connection (peer_dead at once); a
// neighbour that is cut off or hung is found by TCP keepalive probes and TCP_USER_TIMEOUT, both set
// to `heartbeat_timeout`, so a ring waiting on it fails within that time, not TCP's default
// minutes. A membership change (`current_epoch`) cancels a wait within `poll_slice`.
//
// Threads: one link is used by one thread at a time (it has one more of its own, started at the first
// exchange that sends `send_thread_bytes` or more). Ports: tcp_listener is made ahead (its port
// goes into the rendezvous), then connect() takes it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/collective/ring.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::collective {

namespace tcp_detail {
struct cursor;
class send_thread;
}  // namespace tcp_detail

// A listening socket for one rank's inbound connection.
class tcp_listener {
 public:
  // Binds `host` ("0.0.0.0", an address, or a name; port 0 unless given) and listens.
  static expected<std::unique_ptr<tcp_listener>> open(const std::string& host, std::uint16_t port = 0);
  ~tcp_listener();
  tcp_listener(const tcp_listener&) = delete;
  tcp_listener& operator=(const tcp_listener&) = delete;
  std::uint16_t port() const noexcept { return port_; }
  int fd() const noexcept { return fd_; }

 private:
  tcp_listener(int fd, std::uint16_t port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

struct tcp_link_options {
  std::uint64_t epoch = 0;  // membership epoch of this ring
  int rank = 0, size = 1;
  std::string next_address;  // "host:port" of the next rank's listener
  // The job's token: each end proves it holds it before a byte of the ring's numbers is taken
  // (src/tcp/ring_auth.hpp). Empty: every end with an empty one is taken (tests, benchmarks).
  std::string secret;
  std::chrono::milliseconds timeout{10'000};           // per operation, and for the rendezvous
  std::chrono::milliseconds heartbeat_timeout{3'000};  // a silent (cut off) neighbour is dead after this
  std::chrono::milliseconds poll_slice{2};             // how often a wait looks at current_epoch
  std::size_t chunk_bytes = 256 << 10;                 // receive (and accumulate) granularity
  // Exchanges that send at least this many payload bytes write them on the link's own thread while
  // the caller receives; smaller ones (where handing over costs more than it overlaps) and 0: one thread.
  std::size_t send_thread_bytes = 1 << 20;
  // When set and different from `epoch`, operations fail with `cancelled` (membership changed).
  const std::atomic<std::uint64_t>* current_epoch = nullptr;
  // Timeouts and deadlines are measured on it (a manual clock in tests: a wait fails with `timeout`
  // once that clock passes its deadline, looking at it at least every few milliseconds).
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

class tcp_ring_link final : public ring_link {
 public:
  // Dials the next rank (retrying until options.timeout) and accepts the previous one on
  // `listener`; each side names its epoch and rank and proves it holds the job's token, so a
  // stale or stray connection, or one from outside the job, is refused.
  static expected<std::unique_ptr<tcp_ring_link>> connect(const tcp_link_options& options,
                                                          tcp_listener& listener);
  ~tcp_ring_link() override;

  expected<void> exchange(const step_tag& tag, std::span<const float> send, std::span<float> recv,
                          bool accumulate) override;
  expected<void> send(const step_tag& tag, std::span<const float> data) override;
  expected<void> recv(const step_tag& tag, std::span<float> data) override;

 private:
  tcp_ring_link(tcp_link_options o, int in_fd, int out_fd);
  expected<void> transfer(const step_tag& tag, const std::span<const float>* send, std::span<float>* recv,
                          bool accumulate);
  // Moves `out` and `in` until both are done, the deadline passes, or `abandon` (the other thread's
  // half failed) is non-zero.
  expected<void> pump(const step_tag& tag, tcp_detail::cursor& out, tcp_detail::cursor& in, bool accumulate,
                      troupe::clock::time_point deadline, const std::atomic<int>* abandon);
  expected<void> wait_ready(const tcp_detail::cursor& out, const tcp_detail::cursor& in,
                            troupe::clock::time_point deadline, const std::atomic<int>* abandon) const;
  void want_readable(const tcp_detail::cursor& in, bool accumulate);
  // The kernel raises the receive buffer to twice the mark; past this a mark is more buffer than batch.
  static constexpr std::size_t max_rcvlowat = 1 << 20;
  tcp_link_options opt_;
  int in_ = -1, out_ = -1;  // from the previous rank, to the next rank
  int rcvlowat_ = 1;        // SO_RCVLOWAT of in_
  std::vector<float> staging_;
  std::unique_ptr<tcp_detail::send_thread> sender_;  // made at the first exchange that needs it
};

}  // namespace troupe::collective
