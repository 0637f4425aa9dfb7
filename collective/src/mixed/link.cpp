#include "troupe/collective/mixed/link.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include "shm/stream.hpp"
#include "tcp/stream.hpp"

namespace troupe::collective {

tcp_link_options tcp_half_options(const mixed_link_options& o) {
  tcp_link_options t;
  t.epoch = o.shm.epoch;
  t.rank = o.shm.rank;
  t.size = o.shm.size;
  t.next_address = o.next_address;
  t.secret = o.secret;
  t.timeout = o.shm.timeout;
  t.heartbeat_timeout = o.heartbeat_timeout;
  t.chunk_bytes = o.chunk_bytes;
  t.current_epoch = o.shm.current_epoch;
  t.clock = o.shm.clock;
  return t;
}

// One transfer: the shm half's sender or receiver and the TCP half's cursors; the sides a half
// does not carry (and an absent send or recv) are done from the start.
struct mixed_ring_link::transfer_state {
  shm_detail::sender tx;
  shm_detail::receiver rx;
  tcp_detail::cursor out, in;
  bool accumulate = false;
  bool shm_busy() const { return !tx.done() || !rx.done(); }
  bool tcp_busy() const { return !out.done() || !in.done(); }
};

expected<std::unique_ptr<mixed_ring_link>> mixed_ring_link::connect(const mixed_link_options& o) {
  const auto& s = o.shm;
  if (s.size < 3 || s.rank < 0 || s.rank >= s.size)
    return make_unexpected(collective_errc::setup, "mixed link for rank " + std::to_string(s.rank) + " of " +
                                                       std::to_string(s.size) + ": needs 3+ ranks");
  auto deadline = s.clock.get().now() + s.timeout;
  auto t = tcp_half_options(o);
  if (o.tcp_next) {
    auto in = shm_detail::make_inbound_ring(s);
    if (!in) return in.err();
    auto dialled = tcp_detail::dial_next(t, deadline);
    if (!dialled) return dialled.err();
    auto fd = tcp_detail::confirm_next(*dialled, t, deadline);
    if (!fd) return fd.err();
    tcp_detail::make_streaming(*fd);
    (*in)->unlink_when_attached();
    return std::unique_ptr<mixed_ring_link>(new mixed_ring_link(o, std::move(*in), *fd));
  }
  if (!o.listener) return make_unexpected(collective_errc::setup, "no ring listener for the previous rank");
  auto out = shm_detail::open_next_ring(s, deadline);
  if (!out) return out.err();
  auto fd = tcp_detail::accept_prev(*o.listener, t, deadline);
  if (!fd) return fd.err();
  tcp_detail::make_streaming(*fd);
  return std::unique_ptr<mixed_ring_link>(new mixed_ring_link(o, std::move(*out), *fd));
}

mixed_ring_link::mixed_ring_link(mixed_link_options o, std::unique_ptr<transport::shm_ring> ring, int fd)
    : opt_(std::move(o)),
      ring_(std::move(ring)),
      fd_(fd),
      staging_(std::max<std::size_t>(opt_.chunk_bytes / sizeof(float), 1)) {
  const auto& s = opt_.shm;
  watch_ = opt_.tcp_next ? std::make_unique<shm_detail::peer_watch>(s.prev_pid, s.live, s.prev_node)
                         : std::make_unique<shm_detail::peer_watch>(s.next_pid, s.live, s.next_node);
}

mixed_ring_link::~mixed_ring_link() {
  ::close(fd_);
}

expected<void> mixed_ring_link::exchange(const step_tag& tag, std::span<const float> send,
                                         std::span<float> recv, bool accumulate) {
  return transfer(tag, &send, &recv, accumulate);
}

expected<void> mixed_ring_link::send(const step_tag& tag, std::span<const float> data) {
  return transfer(tag, &data, nullptr, false);
}

expected<void> mixed_ring_link::recv(const step_tag& tag, std::span<float> data) {
  return transfer(tag, nullptr, &data, false);
}

expected<void> mixed_ring_link::transfer(const step_tag& tag, const std::span<const float>* send,
                                         std::span<float>* recv, bool accumulate) {
  if (opt_.tcp_next) ring_->unlink_when_attached();  // once the previous rank has opened it
  const bool t = opt_.tcp_next;
  transfer_state st{shm_detail::make_sender(tag, t ? nullptr : send),
                    shm_detail::make_receiver(t ? recv : nullptr, accumulate),
                    tcp_detail::outgoing(tag, t ? send : nullptr), tcp_detail::incoming(t ? nullptr : recv),
                    accumulate};
  auto deadline = opt_.shm.clock.get().now() + opt_.shm.timeout;
  while (st.shm_busy() || st.tcp_busy()) {
    auto moved = pump(st, tag);
    if (!moved) return tcp_detail::unless_cancelled(moved.err(), opt_.shm.current_epoch, tag.epoch);
    if (*moved) continue;
    if (auto s = check_stall(tag, deadline); !s) return s;
    wait(st);
  }
  return {};
}

// Moves what each half can move now; true when anything moved.
expected<bool> mixed_ring_link::pump(transfer_state& t, const step_tag& tag) {
  bool moved = false;
  if (!t.tx.done()) moved = t.tx.pump(*ring_);
  if (!t.rx.done()) {
    int r = t.rx.pump(*ring_, tag);
    if (r < 0) return t.rx.mismatch(tag);
    moved = moved || r > 0;
  }
  if (!t.out.done()) {
    auto s = tcp_detail::send_some(fd_, t.out);
    if (!s) return s.err();
    moved = moved || *s;
  }
  if (!t.in.done()) {
    auto r = tcp_detail::recv_some(fd_, t.in, tag, t.accumulate, staging_);
    if (!r) return r.err();
    moved = moved || *r;
  }
  return moved;
}

expected<void> mixed_ring_link::check_stall(const step_tag& tag, troupe::clock::time_point deadline) const {
  if (opt_.shm.current_epoch && opt_.shm.current_epoch->load(std::memory_order_acquire) != tag.epoch)
    return make_unexpected(collective_errc::cancelled, "epoch " + std::to_string(tag.epoch) + " is over");
  if (watch_->dead())
    return make_unexpected(collective_errc::peer_dead,
                           "pid " + std::to_string(watch_->pid()) + " (op " + std::to_string(tag.op) + ")");
  // A wait on the ring alone would not see the next rank go: its closed connection says so.
  if (opt_.tcp_next && tcp_detail::outbound_closed(fd_))
    return make_unexpected(collective_errc::peer_dead, "next rank closed the connection");
  if (opt_.shm.clock.get().now() >= deadline)
    return make_unexpected(collective_errc::timeout,
                           "op " + std::to_string(tag.op) + " step " + std::to_string(tag.step));
  return {};
}

// Sleeps until a half can move, briefly: the socket wakes a poll, the ring a futex, and a wait on
// one cannot see the other, so while both are busy each wait is a short slice.
void mixed_ring_link::wait(const transfer_state& t) const {
  if (t.tcp_busy()) {
    pollfd p{fd_, static_cast<short>(t.out.done() ? POLLIN : POLLOUT), 0};
    timespec slice{0, t.shm_busy() ? 50'000 : 1'000'000};
    ::ppoll(&p, 1, &slice, nullptr);
  } else if (!t.rx.done()) {
    ring_->wait_for_data(std::chrono::microseconds(250));
  } else {
    ring_->wait_for_space(std::chrono::microseconds(250));
  }
}

}  // namespace troupe::collective
