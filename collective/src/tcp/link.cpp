#include "troupe/collective/tcp/link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace troupe::collective {

namespace {

using steady = std::chrono::steady_clock;
constexpr std::uint32_t hello_magic = 0x74726e67;  // "trng"

struct hello {
  std::uint32_t magic = hello_magic;
  std::int32_t rank = 0;
  std::uint64_t epoch = 0;
};

// The header in front of every payload. Both ends run the same build: native layout.
struct header {
  std::uint64_t epoch = 0;
  std::uint64_t op = 0;
  std::uint32_t step = 0;
  std::uint32_t reserved = 0;
  std::uint64_t bytes = 0;
};

unexpected fail(collective_errc c, const std::string& what) {
  return make_unexpected(c, what);
}

std::string errno_text(int e) {
  return std::strerror(e);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// TCP_NODELAY, and the heartbeat: keepalive probes from one second of silence, and
// TCP_USER_TIMEOUT (which also bounds unanswered keepalives), so a cut-off peer fails the socket
// after `heartbeat` instead of minutes.
void tune(int fd, std::chrono::milliseconds heartbeat) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int secs = std::max<int>(1, static_cast<int>(heartbeat.count() / 3000));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof secs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof secs);
  int count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  unsigned user_timeout = static_cast<unsigned>(heartbeat.count());
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

bool set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

int remaining_ms(steady::time_point deadline, std::chrono::milliseconds cap) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  return static_cast<int>(std::clamp(left, std::chrono::milliseconds(0), cap).count());
}

expected<sockaddr_in> resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || res == nullptr)
    return fail(collective_errc::setup, "cannot resolve '" + host + "': " + ::gai_strerror(rc));
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  a.sin_port = htons(port);
  return a;
}

expected<sockaddr_in> parse_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return fail(collective_errc::setup, "ring address '" + address + "' is not host:port");
  char* end = nullptr;
  unsigned long port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535)
    return fail(collective_errc::setup, "ring address '" + address + "' has a bad port");
  return resolve(address.substr(0, colon), static_cast<std::uint16_t>(port));
}

// Blocking exact-size I/O for the rendezvous (the sockets are still blocking then, with
// SO_RCVTIMEO/SO_SNDTIMEO bounding each call).
bool write_all(int fd, const void* p, std::size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

void set_io_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Dials `to` until it answers or `deadline` (the next rank may not listen yet), then names this
// ring and rank.
expected<int> dial(const sockaddr_in& to, const std::string& address, const tcp_link_options& o,
                   steady::time_point deadline) {
  int last = 0;
  while (steady::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(collective_errc::setup, "socket: " + errno_text(errno));
    tune(fd, o.heartbeat_timeout);
    set_io_timeout(fd, std::chrono::milliseconds(std::max(1, remaining_ms(deadline, o.timeout))));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
      hello h{hello_magic, o.rank, o.epoch};
      if (write_all(fd, &h, sizeof h)) return fd;
      last = errno;
    } else {
      last = errno;
    }
    ::close(fd);
    if (last != ECONNREFUSED && last != EINTR && last != EAGAIN && last != ETIMEDOUT) break;
    ::usleep(2000);
  }
  return fail(last == ECONNREFUSED || last == 0 ? collective_errc::timeout : collective_errc::setup,
              "dialling the next rank at " + address + ": " + (last ? errno_text(last) : "timed out"));
}

// Accepts until the previous rank of this epoch says hello; strays are closed.
expected<int> accept_prev(tcp_listener& l, const tcp_link_options& o, steady::time_point deadline) {
  int prev = (o.rank + o.size - 1) % o.size;
  while (true) {
    int left = remaining_ms(deadline, o.timeout);
    if (left <= 0)
      return fail(collective_errc::timeout, "rank " + std::to_string(prev) + " did not connect to rank " +
                                                std::to_string(o.rank) + " within the rendezvous timeout");
    pollfd p{l.fd(), POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) continue;
    int fd = ::accept4(l.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune(fd, o.heartbeat_timeout);
    set_io_timeout(fd, std::chrono::milliseconds(std::max(1, remaining_ms(deadline, o.timeout))));
    hello h;
    if (read_all(fd, &h, sizeof h) && h.magic == hello_magic && h.rank == prev && h.epoch == o.epoch)
      return fd;
    ::close(fd);  // another epoch's, or not a ring peer at all
  }
}

}  // namespace

expected<std::unique_ptr<tcp_listener>> tcp_listener::open(const std::string& host, std::uint16_t port) {
  auto a = resolve(host, port);
  if (!a) return a.err();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(collective_errc::setup, "socket: " + errno_text(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*a), sizeof *a) != 0 || ::listen(fd, 16) != 0) {
    int e = errno;
    ::close(fd);
    return fail(collective_errc::setup,
                "listening on " + host + ":" + std::to_string(port) + ": " + errno_text(e));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return std::unique_ptr<tcp_listener>(new tcp_listener(fd, ntohs(bound.sin_port)));
}

tcp_listener::~tcp_listener() {
  if (fd_ >= 0) ::close(fd_);
}

expected<std::unique_ptr<tcp_ring_link>> tcp_ring_link::connect(const tcp_link_options& o, tcp_listener& l) {
  if (o.size < 2 || o.rank < 0 || o.rank >= o.size)
    return fail(collective_errc::setup, "rank " + std::to_string(o.rank) + " of " + std::to_string(o.size));
  auto to = parse_address(o.next_address);
  if (!to) return to.err();
  auto deadline = steady::now() + o.timeout;
  auto out = dial(*to, o.next_address, o, deadline);
  if (!out) return out.err();
  auto in = accept_prev(l, o, deadline);
  if (!in) {
    ::close(*out);
    return in.err();
  }
  for (int fd : {*in, *out}) {
    set_io_timeout(fd, std::chrono::milliseconds(0));
    set_nonblocking(fd);
  }
  return std::unique_ptr<tcp_ring_link>(new tcp_ring_link(o, *in, *out));
}

tcp_ring_link::tcp_ring_link(tcp_link_options o, int in_fd, int out_fd)
    : opt_(std::move(o)),
      in_(in_fd),
      out_(out_fd),
      staging_(std::max<std::size_t>(opt_.chunk_bytes / sizeof(float), 1)) {}

tcp_ring_link::~tcp_ring_link() {
  close_fd(in_);
  close_fd(out_);
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

namespace {

bool would_block(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

std::string peer_gone_text(const char* who, int e) {
  if (e == ETIMEDOUT) return std::string(who) + " silent past the heartbeat timeout (cut off or gone)";
  if (e == 0) return std::string(who) + " closed the connection";
  return std::string(who) + ": " + errno_text(e);
}

}  // namespace

// One direction of one transfer: a header, then the payload.
struct tcp_ring_link::cursor {
  header h{};
  std::size_t header_done = 0;
  char* payload = nullptr;
  std::size_t payload_bytes = 0, payload_done = 0;
  std::size_t staged = 0;  // accumulate: bytes in staging_ not yet added
  bool active = false;
  bool done() const { return !active || (header_done == sizeof(header) && payload_done == payload_bytes); }
};

// Writes what the socket takes of the header and payload; true when bytes moved.
expected<bool> tcp_ring_link::send_some(cursor& out) {
  iovec iov[2];
  int n = 0;
  if (out.header_done < sizeof(header))
    iov[n++] = {reinterpret_cast<char*>(&out.h) + out.header_done, sizeof(header) - out.header_done};
  if (out.payload_done < out.payload_bytes)
    iov[n++] = {out.payload + out.payload_done, out.payload_bytes - out.payload_done};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<std::size_t>(n);
  ssize_t w = ::sendmsg(out_, &m, MSG_NOSIGNAL);
  if (w < 0 && !would_block(errno))
    return fail(collective_errc::peer_dead, peer_gone_text("next rank", errno));
  if (w <= 0) return false;
  auto wb = static_cast<std::size_t>(w);
  auto h = std::min(wb, sizeof(header) - out.header_done);
  out.header_done += h;
  out.payload_done += wb - h;
  return true;
}

// The header must name this exchange and its size.
expected<void> tcp_ring_link::check_header(const cursor& in, const step_tag& tag) const {
  const header& h = in.h;
  if (h.epoch == tag.epoch && h.op == tag.op && h.step == tag.step && h.bytes == in.payload_bytes) return {};
  auto say = [](std::uint64_t e, std::uint64_t op, std::uint64_t step, std::uint64_t bytes) {
    return "epoch " + std::to_string(e) + " op " + std::to_string(op) + " step " + std::to_string(step) +
           " (" + std::to_string(bytes) + " bytes)";
  };
  return fail(collective_errc::protocol, "previous rank sent " + say(h.epoch, h.op, h.step, h.bytes) +
                                             ", expected " +
                                             say(tag.epoch, tag.op, tag.step, in.payload_bytes));
}

// Reads what has arrived; with `accumulate`, a chunk at a time into staging_, added once whole.
expected<bool> tcp_ring_link::recv_some(cursor& in, const step_tag& tag, bool accumulate) {
  char* staging = reinterpret_cast<char*>(staging_.data());
  const std::size_t chunk = staging_.size() * sizeof(float);
  bool in_header = in.header_done < sizeof(header);
  char* dst = in_header    ? reinterpret_cast<char*>(&in.h) + in.header_done
              : accumulate ? staging + in.staged
                           : in.payload + in.payload_done;
  std::size_t want = in_header    ? sizeof(header) - in.header_done
                     : accumulate ? std::min(chunk, in.payload_bytes - in.payload_done) - in.staged
                                  : in.payload_bytes - in.payload_done;
  ssize_t r = ::recv(in_, dst, want, 0);
  if (r == 0) return fail(collective_errc::peer_dead, peer_gone_text("previous rank", 0));
  if (r < 0 && !would_block(errno))
    return fail(collective_errc::peer_dead, peer_gone_text("previous rank", errno));
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
    for (std::size_t i = 0, nf = in.staged / sizeof(float); i < nf; ++i) acc[i] += staging_[i];
    in.payload_done += in.staged;
    in.staged = 0;
  }
  return true;
}

// Nothing moved: fails on a replaced epoch or the operation's deadline, else waits for either socket.
expected<void> tcp_ring_link::wait_ready(const cursor& out, const cursor& in,
                                         steady::time_point deadline) const {
  if (opt_.current_epoch && opt_.current_epoch->load(std::memory_order_relaxed) != opt_.epoch)
    return fail(collective_errc::cancelled, "ring epoch " + std::to_string(opt_.epoch) + " replaced");
  if (steady::now() >= deadline)
    return fail(collective_errc::timeout, std::string("no progress with the ") +
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
  cursor out, in;
  if (send) {
    out.active = true;
    out.h = {tag.epoch, tag.op, tag.step, 0, send->size_bytes()};
    out.payload = const_cast<char*>(reinterpret_cast<const char*>(send->data()));
    out.payload_bytes = send->size_bytes();
  }
  if (recv) {
    in.active = true;
    in.payload = reinterpret_cast<char*>(recv->data());
    in.payload_bytes = recv->size_bytes();
  }
  auto deadline = steady::now() + opt_.timeout;
  while (!out.done() || !in.done()) {
    bool moved = false;
    if (!out.done()) {
      auto s = send_some(out);
      if (!s) return s.err();
      moved = *s;
    }
    if (!in.done()) {
      auto r = recv_some(in, tag, accumulate);
      if (!r) return r.err();
      moved = moved || *r;
    }
    if (!moved)
      if (auto w = wait_ready(out, in, deadline); !w) return w;
  }
  return {};
}

}  // namespace troupe::collective
