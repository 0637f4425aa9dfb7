#include "troupe/collective/tcp/link.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "tcp/send_thread.hpp"
#include "tcp/stream.hpp"

namespace troupe::collective {

using namespace tcp_detail;

expected<std::unique_ptr<tcp_ring_link>> tcp_ring_link::connect(const tcp_link_options& o, tcp_listener& l) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size)
    return make_unexpected(collective_errc::setup,
                           "rank " + std::to_string(o.rank) + " of " + std::to_string(o.size));
  auto deadline = o.clock.get().now() + o.timeout;
  auto dialled = dial_next(o, deadline);
  if (!dialled) return dialled.err();
  auto in = accept_prev(l, o, deadline);
  if (!in) {
    ::close(dialled->fd);
    return in.err();
  }
  // After accepting: every rank dials, then accepts, then waits for its welcome, so no rank waits
  // on one that is itself waiting.
  auto out = confirm_next(*dialled, o, deadline);
  if (!out) {
    ::close(*in);
    return out.err();
  }
  make_streaming(*in);
  make_streaming(*out);
  return std::unique_ptr<tcp_ring_link>(new tcp_ring_link(o, *in, *out));
}

tcp_ring_link::tcp_ring_link(tcp_link_options o, int in_fd, int out_fd)
    : opt_(std::move(o)),
      in_(in_fd),
      out_(out_fd),
      staging_(std::max<std::size_t>(opt_.chunk_bytes / sizeof(float), 1)) {}

tcp_ring_link::~tcp_ring_link() {
  ::close(in_);
  ::close(out_);
}

expected<void> tcp_ring_link::exchange(const step_tag& tag, std::span<const float> send,
                                       std::span<float> recv, bool accumulate) {
  return transfer(tag, &send, &recv, accumulate);
}

expected<void> tcp_ring_link::send(const step_tag& tag, std::span<const float> data) {
  return transfer(tag, &data, nullptr, false);
}

expected<void> tcp_ring_link::recv(const step_tag& tag, std::span<float> data) {
  return transfer(tag, nullptr, &data, false);
}

// Nothing moved: fails on a replaced epoch, the operation's deadline or a failed other half, else
// waits for either socket.
expected<void> tcp_ring_link::wait_ready(const cursor& out, const cursor& in, time_point deadline,
                                         const std::atomic<int>* abandon) const {
  if (abandon && abandon->load(std::memory_order_acquire) != 0)
    return make_unexpected(collective_errc::cancelled, "the other half of the exchange failed");
  if (opt_.current_epoch && opt_.current_epoch->load(std::memory_order_relaxed) != opt_.epoch)
    return make_unexpected(collective_errc::cancelled,
                           "ring epoch " + std::to_string(opt_.epoch) + " replaced");
  if (opt_.clock.get().now() >= deadline)
    return make_unexpected(collective_errc::timeout, std::string("no progress with the ") +
                                                         (in.done() ? "next" : "previous") +
                                                         " rank within the operation timeout");
  pollfd p[2];
  nfds_t np = 0;
  if (!out.done()) p[np++] = {out_, POLLOUT, 0};
  if (!in.done()) p[np++] = {in_, POLLIN, 0};
  ::poll(p, np, std::max(remaining_ms(opt_.clock, deadline, opt_.poll_slice), 1));
  return {};
}

// The receive low-water mark: poll(2) wakes when the next read can take a whole chunk (or what is
// left of the message), not at every segment, so a rank the wire outpaces sleeps instead of
// reading 64 KB at a time. Set only when it changes.
void tcp_ring_link::want_readable(const cursor& in, bool accumulate) {
  if (in.done()) return;
  int lowat = static_cast<int>(std::clamp<std::size_t>(
      next_read_bytes(in, accumulate, staging_.size() * sizeof(float)), 1, max_rcvlowat));
  if (lowat == rcvlowat_) return;
  if (::setsockopt(in_, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0) rcvlowat_ = lowat;
}

expected<void> tcp_ring_link::transfer(const step_tag& tag, const std::span<const float>* send,
                                       std::span<float>* recv, bool accumulate) {
  cursor out = outgoing(tag, send), in = incoming(recv);
  auto deadline = opt_.clock.get().now() + opt_.timeout;
  bool split = send && recv && opt_.send_thread_bytes > 0 && send->size_bytes() >= opt_.send_thread_bytes;
  if (!split) return pump(tag, out, in, accumulate, deadline, nullptr);
  if (!sender_) sender_ = std::make_unique<send_thread>();
  // Each half stops the other's wait when it fails; the first failure is the one returned (the other
  // half's is only that it was stopped).
  enum : int { none_failed, send_failed, recv_failed };
  std::atomic<int> failed{none_failed};
  sender_->start([&]() -> expected<void> {
    cursor nothing;
    auto r = pump(tag, out, nothing, false, deadline, &failed);
    if (!r) {
      int expect = none_failed;
      failed.compare_exchange_strong(expect, send_failed);
    }
    return r;
  });
  cursor nothing;
  auto received = pump(tag, nothing, in, accumulate, deadline, &failed);
  if (!received) {
    int expect = none_failed;
    failed.compare_exchange_strong(expect, recv_failed);
  }
  auto sent = sender_->finish();
  return failed.load() == send_failed ? sent : received;
}

expected<void> tcp_ring_link::pump(const step_tag& tag, cursor& out, cursor& in, bool accumulate,
                                   time_point deadline, const std::atomic<int>* abandon) {
  // Each half is tried until the socket takes or gives less than asked; then both wait in poll(2),
  // which wakes for a chunk's worth (want_readable) or for room in the send buffer.
  while (!out.done() || !in.done()) {
    if (!out.done() && !out.starved) {
      auto s = send_some(out_, out);
      if (!s) return unless_cancelled(s.err(), opt_.current_epoch, tag.epoch);
    }
    if (!in.done() && !in.starved) {
      auto r = recv_some(in_, in, tag, accumulate, staging_);
      if (!r) return unless_cancelled(r.err(), opt_.current_epoch, tag.epoch);
    }
    if (out.done() && in.done()) break;
    if ((out.done() || out.starved) && (in.done() || in.starved)) {
      want_readable(in, accumulate);
      if (auto w = wait_ready(out, in, deadline, abandon); !w) return w;
      out.starved = in.starved = false;
    }
  }
  return {};
}

}  // namespace troupe::collective
