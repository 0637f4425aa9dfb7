// One message over a non-blocking socket of a TCP ring link.
#include "tcp/stream.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace troupe::collective::tcp_detail {

namespace {

bool would_block(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

unexpected peer_gone(const char* who, int e) {
  std::string why = e == ETIMEDOUT ? std::string(who) + " silent past the heartbeat timeout (cut off or gone)"
                    : e == 0       ? std::string(who) + " closed the connection"
                                   : std::string(who) + ": " + std::strerror(e);
  return make_unexpected(collective_errc::peer_dead, why);
}

// The header must name this exchange and its size.
expected<void> check_header(const cursor& in, const step_tag& tag) {
  const header& h = in.h;
  if (h.epoch == tag.epoch && h.op == tag.op && h.step == tag.step && h.bytes == in.payload_bytes) return {};
  auto say = [](std::uint64_t e, std::uint64_t op, std::uint64_t step, std::uint64_t bytes) {
    return "epoch " + std::to_string(e) + " op " + std::to_string(op) + " step " + std::to_string(step) +
           " (" + std::to_string(bytes) + " bytes)";
  };
  return make_unexpected(collective_errc::protocol, "previous rank sent " +
                                                        say(h.epoch, h.op, h.step, h.bytes) + ", expected " +
                                                        say(tag.epoch, tag.op, tag.step, in.payload_bytes));
}

}  // namespace

cursor outgoing(const step_tag& tag, const std::span<const float>* send) {
  cursor out;
  if (send) {
    out.active = true;
    out.h = {tag.epoch, tag.op, tag.step, 0, send->size_bytes()};
    out.payload = const_cast<char*>(reinterpret_cast<const char*>(send->data()));
    out.payload_bytes = send->size_bytes();
  }
  return out;
}

cursor incoming(const std::span<float>* recv) {
  cursor in;
  if (recv) {
    in.active = true;
    in.payload = reinterpret_cast<char*>(recv->data());
    in.payload_bytes = recv->size_bytes();
  }
  return in;
}

expected<bool> send_some(int fd, cursor& out) {
  iovec iov[2];
  int n = 0;
  if (out.header_done < sizeof(header))
    iov[n++] = {reinterpret_cast<char*>(&out.h) + out.header_done, sizeof(header) - out.header_done};
  if (out.payload_done < out.payload_bytes)
    iov[n++] = {out.payload + out.payload_done, out.payload_bytes - out.payload_done};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<std::size_t>(n);
  std::size_t asked = 0;
  for (int i = 0; i < n; ++i) asked += iov[i].iov_len;
  ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
  if (w < 0 && !would_block(errno)) return peer_gone("next rank", errno);
  out.starved = w < static_cast<ssize_t>(asked);
  if (w <= 0) return false;
  auto wb = static_cast<std::size_t>(w);
  auto h = std::min(wb, sizeof(header) - out.header_done);
  out.header_done += h;
  out.payload_done += wb - h;
  return true;
}

expected<bool> recv_some(int fd, cursor& in, const step_tag& tag, bool accumulate, std::span<float> staging) {
  char* stage = reinterpret_cast<char*>(staging.data());
  const std::size_t chunk = staging.size_bytes();
  bool in_header = in.header_done < sizeof(header);
  char* dst = in_header    ? reinterpret_cast<char*>(&in.h) + in.header_done
              : accumulate ? stage + in.staged
                           : in.payload + in.payload_done;
  std::size_t want = in_header    ? sizeof(header) - in.header_done
                     : accumulate ? std::min(chunk, in.payload_bytes - in.payload_done) - in.staged
                                  : in.payload_bytes - in.payload_done;
  ssize_t r = ::recv(fd, dst, want, 0);
  if (r == 0) return peer_gone("previous rank", 0);
  if (r < 0 && !would_block(errno)) return peer_gone("previous rank", errno);
  in.starved = r < static_cast<ssize_t>(want);
  if (r < 0) return false;
  auto rb = static_cast<std::size_t>(r);
  if (in_header) {
    in.header_done += rb;
    if (in.header_done == sizeof(header))
      if (auto ok = check_header(in, tag); !ok) return ok.err();
  } else if (!accumulate) {
    in.payload_done += rb;
  } else if ((in.staged += rb) == chunk || in.payload_done + in.staged == in.payload_bytes) {
    auto* acc = reinterpret_cast<float*>(in.payload + in.payload_done);
    for (std::size_t i = 0, nf = in.staged / sizeof(float); i < nf; ++i) acc[i] += staging[i];
    in.payload_done += in.staged;
    in.staged = 0;
  }
  return true;
}

std::size_t next_read_bytes(const cursor& in, bool accumulate, std::size_t chunk) {
  if (in.header_done < sizeof(header)) return sizeof(header) - in.header_done;
  std::size_t left = in.payload_bytes - in.payload_done;
  return accumulate ? std::min(chunk, left) - in.staged : std::min(chunk, left);
}

error unless_cancelled(error e, const std::atomic<std::uint64_t>* current_epoch, std::uint64_t epoch) {
  if (!current_epoch || current_epoch->load(std::memory_order_acquire) == epoch) return e;
  return error(collective_errc::cancelled,
               "ring epoch " + std::to_string(epoch) + " replaced (" + e.to_string() + ")");
}

bool outbound_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP)) != 0;
}

}  // namespace troupe::collective::tcp_detail
