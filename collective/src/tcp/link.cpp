#include "troupe/collective/tcp/link.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "tcp/stream.hpp"

namespace troupe::collective {

using namespace tcp_detail;

expected<std::unique_ptr<tcp_ring_link>> tcp_ring_link::connect(const tcp_link_options& o, tcp_listener& l) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size)
    return make_unexpected(collective_errc::setup,
                           "rank " + std::to_string(o.rank) + " of " + std::to_string(o.size));
  auto deadline = steady::now() + o.timeout;
  auto out = dial_next(o, deadline);
  if (!out) return out.err();
  auto in = accept_prev(l, o, deadline);
  if (!in) {
    ::close(*out);
    return in.err();
  }
  // After accepting: every rank dials, then accepts, then waits for its welcome, so no rank waits
  // on one that is itself waiting.
  out = confirm_next(*out, o, deadline);
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

// Nothing moved: fails on a replaced epoch or the operation's deadline, else waits for either socket.
expected<void> tcp_ring_link::wait_ready(const cursor& out, const cursor& in,
                                         steady::time_point deadline) const {
  if (opt_.current_epoch && opt_.current_epoch->load(std::memory_order_relaxed) != opt_.epoch)
    return make_unexpected(collective_errc::cancelled,
                           "ring epoch " + std::to_string(opt_.epoch) + " replaced");
  if (steady::now() >= deadline)
    return make_unexpected(collective_errc::timeout, std::string("no progress with the ") +
                                                         (in.done() ? "next" : "previous") +
                                                         " rank within the operation timeout");
  pollfd p[2];
  nfds_t np = 0;
  if (!out.done()) p[np++] = {out_, POLLOUT, 0};
  if (!in.done()) p[np++] = {in_, POLLIN, 0};
  ::poll(p, np, std::max(remaining_ms(deadline, opt_.poll_slice), 1));
  return {};
}

expected<void> tcp_ring_link::transfer(const step_tag& tag, const std::span<const float>* send,
                                       std::span<float>* recv, bool accumulate) {
  cursor out = outgoing(tag, send), in = incoming(recv);
  auto deadline = steady::now() + opt_.timeout;
  while (!out.done() || !in.done()) {
    bool moved = false;
    if (!out.done()) {
      auto s = send_some(out_, out);
      if (!s) return unless_cancelled(s.err(), opt_.current_epoch, tag.epoch);
      moved = *s;
    }
    if (!in.done()) {
      auto r = recv_some(in_, in, tag, accumulate, staging_);
      if (!r) return unless_cancelled(r.err(), opt_.current_epoch, tag.epoch);
      moved = moved || *r;
    }
    if (!moved)
      if (auto w = wait_ready(out, in, deadline); !w) return w;
  }
  return {};
}

}  // namespace troupe::collective
