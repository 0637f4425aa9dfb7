// The rendezvous of a TCP ring link: listeners, dialling the next rank, accepting the previous one.
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
#include <vector>

#include <spdlog/spdlog.h>

#include "tcp/ring_auth.hpp"
#include "tcp/stream.hpp"

namespace troupe::collective {
namespace tcp_detail {

namespace {

constexpr std::uint32_t hello_magic = 0x74726e67;    // "trng"
constexpr std::uint32_t welcome_magic = 0x74726e61;  // "trna": the previous rank's hello is taken

// The dialling rank's first bytes, and the accepting rank's answer (tcp/ring_auth.hpp: the proofs).
struct hello {
  std::uint32_t magic = hello_magic;
  std::int32_t rank = 0;
  std::uint64_t epoch = 0;
  ring_nonce nonce{};
  ring_mac proof{};
};
static_assert(sizeof(hello) == 64);

struct welcome {
  std::uint32_t magic = welcome_magic;
  ring_mac proof{};
};
static_assert(sizeof(welcome) == 36);

unexpected fail(collective_errc c, const std::string& what) {
  return make_unexpected(c, what);
}

std::string errno_text(int e) {
  return std::strerror(e);
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

// The ring this rendezvous is for will never form: the membership moved on.
bool cancelled(const tcp_link_options& o) {
  return o.current_epoch && o.current_epoch->load(std::memory_order_acquire) != o.epoch;
}

unexpected cancel_error(const tcp_link_options& o, const std::string& before) {
  return fail(collective_errc::cancelled, "epoch " + std::to_string(o.epoch) + " is over before " + before);
}

}  // namespace

int remaining_ms(const troupe::clock& clk, time_point deadline, std::chrono::milliseconds cap) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk.now());
  return static_cast<int>(std::clamp(left, std::chrono::milliseconds(0), cap).count());
}

void make_streaming(int fd) {
  set_io_timeout(fd, std::chrono::milliseconds(0));
  set_nonblocking(fd);
}

expected<dialled> dial_next(const tcp_link_options& o, time_point deadline) {
  auto parsed = parse_address(o.next_address);
  if (!parsed) return parsed.err();
  const sockaddr_in& to = *parsed;
  const std::string& address = o.next_address;
  int last = 0;
  while (o.clock.get().now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(collective_errc::setup, "socket: " + errno_text(errno));
    tune(fd, o.heartbeat_timeout);
    set_io_timeout(fd, std::chrono::milliseconds(std::max(1, remaining_ms(o.clock, deadline, o.timeout))));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
      hello h{hello_magic, o.rank, o.epoch, make_ring_nonce(), {}};
      h.proof = ring_proof(derive_ring_key(o.secret), ring_role::hello, o.rank, o.epoch, h.nonce);
      if (write_all(fd, &h, sizeof h)) return dialled{fd, h.nonce};
      last = errno;
    } else {
      last = errno;
    }
    ::close(fd);
    if (last != ECONNREFUSED && last != EINTR && last != EAGAIN && last != ETIMEDOUT) break;
    if (cancelled(o)) return cancel_error(o, address + " answered");
    // Must poll: nothing here is told when another host starts listening. A short pause on the
    // link's clock between dials (on a manual clock, the pause advances it).
    o.clock.get().sleep_for(std::chrono::milliseconds(2));
  }
  return fail(last == ECONNREFUSED || last == 0 ? collective_errc::timeout : collective_errc::setup,
              "dialling the next rank at " + address + ": " + (last ? errno_text(last) : "timed out"));
}

// What a connection brought: not a whole hello yet, the previous rank's hello for this epoch (then
// it is welcomed), one without the job's token, or anything else.
enum class hello_kind { waiting, peer, no_token, other };

hello_kind check_hello(int fd, const hello& h, const tcp_link_options& o, int prev, time_point deadline) {
  if (h.magic != hello_magic || h.rank != prev || h.epoch != o.epoch) return hello_kind::other;
  const auto key = derive_ring_key(o.secret);
  if (!ring_proof_ok(key, ring_role::hello, prev, o.epoch, h.nonce, h.proof)) return hello_kind::no_token;
  set_io_timeout(fd, std::chrono::milliseconds(std::max(1, remaining_ms(o.clock, deadline, o.timeout))));
  welcome w{welcome_magic, ring_proof(key, ring_role::welcome, o.rank, o.epoch, h.nonce)};
  return write_all(fd, &w, sizeof w) ? hello_kind::peer : hello_kind::other;
}

// The address a connection came from, for the log.
std::string peer_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown address";
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// Accepted connections waiting for their hello, side by side, each read as far as it has come
// without waiting: a ring peer writes its hello right after it connects, so one that has not brought
// a whole hello within `hello_wait` (or the oldest, past `max_waiting`) is no peer and is closed. A
// stranger holding a connection open (a silent one held the accept loop until the rendezvous
// deadline), opening many, or trickling bytes (40 connections of one byte each, every one read with
// a wait for the rest, stretched a rebuild from under 3 ms to 4.5 s) delays nobody.
class hello_queue {
 public:
  static constexpr auto hello_wait = std::chrono::seconds(1);
  static constexpr std::size_t max_waiting = 16;
  ~hello_queue() {
    for (auto& w : waiting_) ::close(w.fd);
  }
  // The listener's and the waiting connections' poll entries.
  std::vector<pollfd>& poll_set(int listener) {
    ps_.assign(1, pollfd{listener, POLLIN, 0});
    for (const auto& w : waiting_) ps_.push_back(pollfd{w.fd, POLLIN, 0});
    return ps_;
  }
  // After the poll: the connection that brought the hello (-1: none yet); the others that spoke
  // anything but a hello, closed, and those silent too long.
  int take(const tcp_link_options& o, int prev, time_point deadline, time_point now) {
    // From the back (ps_[i + 1] is waiting_[i] as polled): erasing keeps the indices still to look at.
    for (std::size_t i = waiting_.size(); i-- > 0;) {
      auto& w = waiting_[i];
      const auto kind = ps_[i + 1].revents != 0 ? read_some(w, o, prev, deadline) : hello_kind::waiting;
      if (kind == hello_kind::waiting && now - w.since < hello_wait) continue;
      const int fd = w.fd;
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      if (kind == hello_kind::peer) return fd;
      if (kind == hello_kind::no_token && !refused_logged_) {
        // Once per rendezvous: a stranger dialling in a loop must not flood the log.
        spdlog::warn("ring epoch {}: refused a connection from {} that named rank {} without the job's token",
                     o.epoch, peer_of(fd), prev);
        refused_logged_ = true;
      }
      ::close(fd);  // silent too long, another epoch's (a rank behind or ahead: it dials again), or no peer
    }
    return -1;
  }
  void add(int fd, time_point now) {
    if (waiting_.size() >= max_waiting) {
      ::close(waiting_.front().fd);
      waiting_.erase(waiting_.begin());
    }
    waiting_.push_back({fd, now, {}, 0});
  }

 private:
  struct waiting_fd {
    int fd;
    time_point since;
    hello h;
    std::size_t got;
  };
  // Reads what the readable connection has, never waiting for more.
  static hello_kind read_some(waiting_fd& w, const tcp_link_options& o, int prev, time_point deadline) {
    ssize_t r = ::recv(w.fd, reinterpret_cast<char*>(&w.h) + w.got, sizeof w.h - w.got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return hello_kind::waiting;
    if (r <= 0) return hello_kind::other;
    w.got += static_cast<std::size_t>(r);
    if (w.got < sizeof w.h) return hello_kind::waiting;
    return check_hello(w.fd, w.h, o, prev, deadline);
  }
  std::vector<waiting_fd> waiting_;
  std::vector<pollfd> ps_;
  bool refused_logged_ = false;
};

expected<int> accept_prev(tcp_listener& l, const tcp_link_options& o, time_point deadline) {
  const int prev = (o.rank + o.size - 1) % o.size;
  hello_queue q;
  while (true) {
    int left = remaining_ms(o.clock, deadline, o.timeout);
    if (left <= 0)
      return fail(collective_errc::timeout, "rank " + std::to_string(prev) + " did not connect to rank " +
                                                std::to_string(o.rank) + " within the rendezvous timeout");
    if (cancelled(o)) return cancel_error(o, "rank " + std::to_string(prev) + " connected");
    auto& ps = q.poll_set(l.fd());
    if (::poll(ps.data(), ps.size(), std::min(left, 20)) < 0) continue;
    const bool incoming = (ps[0].revents & POLLIN) != 0;
    const auto now = o.clock.get().now();
    if (int fd = q.take(o, prev, deadline, now); fd >= 0) return fd;
    if (!incoming) continue;
    int fd = ::accept4(l.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune(fd, o.heartbeat_timeout);
    q.add(fd, now);
  }
}

expected<int> confirm_next(dialled d, const tcp_link_options& o, time_point deadline) {
  const int next = (o.rank + 1) % o.size;
  while (true) {
    const int fd = d.fd;
    // In slices: the epoch may be over while the hello waits in the next rank's backlog.
    pollfd p{fd, POLLIN, 0};
    int ready = 0;
    while (!cancelled(o) && o.clock.get().now() < deadline && ready <= 0) {
      ready = ::poll(&p, 1, std::max(1, remaining_ms(o.clock, deadline, std::chrono::milliseconds(20))));
      if (ready < 0 && errno != EINTR) break;
    }
    welcome w;
    if (ready > 0 && read_all(fd, &w, sizeof w) && w.magic == welcome_magic) {
      if (ring_proof_ok(derive_ring_key(o.secret), ring_role::welcome, next, o.epoch, d.nonce, w.proof))
        return fd;
      ::close(fd);
      return fail(collective_errc::setup, "the next rank's address " + o.next_address +
                                              " answered without the job's token (not a rank of this job)");
    }
    ::close(fd);
    if (cancelled(o)) return cancel_error(o, "the next rank took this ring's hello");
    if (o.clock.get().now() >= deadline)
      return fail(collective_errc::timeout,
                  "the next rank at " + o.next_address +
                      " did not take this ring's hello within the rendezvous timeout");
    // Closed unanswered: the next rank was still linking another epoch's ring. Dial again after a
    // pause on the link's clock (as dial_next's: nothing says when that rank is done linking).
    o.clock.get().sleep_for(std::chrono::milliseconds(2));
    auto again = dial_next(o, deadline);
    if (!again) return again.err();
    d = *again;
  }
}

}  // namespace tcp_detail

using namespace tcp_detail;

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

}  // namespace troupe::collective
