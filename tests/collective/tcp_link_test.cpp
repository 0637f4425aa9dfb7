// Ring collectives over TCP links on loopback: ranks as threads (and a forked process for the
// death case), each with its own listener; sums checked exactly (integer-valued floats).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "troupe/collective/tcp/link.hpp"

namespace troupe::collective {
namespace {

using namespace std::chrono_literals;

std::vector<float> rank_data(int rank, size_t n) {
  std::vector<float> v(n);
  std::mt19937 g(rank + 7);
  std::uniform_int_distribution<int> d(-100, 100);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

struct ring {
  std::vector<std::unique_ptr<tcp_listener>> listeners;
  explicit ring(int size) {
    for (int r = 0; r < size; ++r) {
      auto l = tcp_listener::open("127.0.0.1");
      EXPECT_TRUE(l) << l.err().to_string();
      listeners.push_back(std::move(*l));
    }
  }
  tcp_link_options options(int rank, std::uint64_t epoch = 1) const {
    tcp_link_options o;
    o.epoch = epoch;
    o.rank = rank;
    o.size = static_cast<int>(listeners.size());
    o.next_address = "127.0.0.1:" + std::to_string(listeners[(rank + 1) % listeners.size()]->port());
    o.timeout = 10s;
    o.chunk_bytes = 4096;  // small: many chunks, partial reads across chunk edges
    return o;
  }
  // Runs body(rank, link) on one thread per rank; returns each rank's error text ("" = ok).
  std::vector<std::string> run(const std::function<expected<void>(int, tcp_ring_link&)>& body,
                               std::function<void(tcp_link_options&)> tweak = {}) {
    int size = static_cast<int>(listeners.size());
    std::vector<std::string> errs(static_cast<size_t>(size));
    std::vector<std::thread> ts;
    for (int r = 0; r < size; ++r) {
      ts.emplace_back([&, r] {
        auto o = options(r);
        if (tweak) tweak(o);
        auto link = tcp_ring_link::connect(o, *listeners[static_cast<size_t>(r)]);
        if (!link) {
          errs[static_cast<size_t>(r)] = "connect: " + link.err().to_string();
          return;
        }
        if (auto res = body(r, **link); !res) errs[static_cast<size_t>(r)] = res.err().to_string();
      });
    }
    for (auto& t : ts) t.join();
    return errs;
  }
};

void expect_sum(int size, size_t n, std::function<void(tcp_link_options&)> tweak = {}) {
  ring rg(size);
  std::vector<float> want(n, 0.f);
  for (int r = 0; r < size; ++r) {
    auto d = rank_data(r, n);
    for (size_t i = 0; i < n; ++i) want[i] += d[i];
  }
  std::vector<std::vector<float>> got(static_cast<size_t>(size));
  auto errs = rg.run(
      [&](int r, tcp_ring_link& l) -> expected<void> {
        auto d = rank_data(r, n);
        for (std::uint64_t op = 1; op <= 3; ++op) {  // the link carries several operations in order
          d = rank_data(r, n);
          if (auto res = ring_allreduce(l, r, size, d, 1, op); !res) return res;
        }
        got[static_cast<size_t>(r)] = d;
        return {};
      },
      tweak);
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(errs[static_cast<size_t>(r)], "") << "rank " << r;
    ASSERT_EQ(got[static_cast<size_t>(r)], want) << "rank " << r << " of " << size << ", n " << n;
  }
}

TEST(tcp_ring, allreduce_sums_exactly) {
  for (int size : {2, 3, 4})
    for (size_t n : {size_t{1}, size_t{5}, size_t{4097}, size_t{1} << 18}) expect_sum(size, n);
}

// Every exchange from 4 KB up writes on the link's send thread while the caller reads and adds.
TEST(tcp_ring, allreduce_sums_exactly_with_the_send_thread) {
  auto threaded = [](tcp_link_options& o) { o.send_thread_bytes = 4096; };
  for (int size : {2, 3, 4})
    for (size_t n : {size_t{5}, size_t{4097 * 4}, size_t{1} << 18}) expect_sum(size, n, threaded);
}

// The receive low-water mark follows the message: after a large exchange has raised it to a chunk,
// a message shorter than a chunk must still wake the poll at once, not at the end of a poll slice.
TEST(tcp_ring, a_short_message_after_a_long_one_is_not_held_for_the_poll_slice) {
  ring rg(2);
  std::vector<double> ms(2);
  auto errs = rg.run(
      [&](int r, tcp_ring_link& l) -> expected<void> {
        auto big = rank_data(r, 1 << 18);
        if (auto res = ring_allreduce(l, r, 2, big, 1, 1); !res) return res;
        auto t0 = std::chrono::steady_clock::now();
        for (std::uint64_t op = 2; op < 22; ++op) {
          std::vector<float> d(3, 1.f);
          if (auto res = ring_allreduce(l, r, 2, d, 1, op); !res) return res;
        }
        ms[static_cast<size_t>(r)] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return {};
      },
      [](tcp_link_options& o) {
        o.chunk_bytes = 64 << 10;
        o.poll_slice = 1s;  // a wait the mark does not end lasts a second
      });
  ASSERT_EQ(errs[0], "");
  ASSERT_EQ(errs[1], "");
  EXPECT_LT(ms[0], 900) << "20 short allreduces waited out poll slices";
  EXPECT_LT(ms[1], 900) << "20 short allreduces waited out poll slices";
}

TEST(tcp_ring, broadcast_from_any_root) {
  const int size = 3;
  const size_t n = 100000;
  for (int root = 0; root < size; ++root) {
    ring rg(size);
    std::vector<std::vector<float>> got(size);
    auto errs = rg.run([&](int r, tcp_ring_link& l) -> expected<void> {
      std::vector<float> d = r == root ? rank_data(root, n) : std::vector<float>(n, 0.f);
      auto res = ring_broadcast(l, r, size, d, root, 1, 9);
      got[static_cast<size_t>(r)] = d;
      return res;
    });
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(errs[static_cast<size_t>(r)], "");
      EXPECT_EQ(got[static_cast<size_t>(r)], rank_data(root, n)) << "root " << root << " rank " << r;
    }
  }
}

TEST(tcp_ring, a_changed_epoch_cancels_a_wait) {
  ring rg(2);
  std::atomic<std::uint64_t> current{1};
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  auto errs = rg.run(
      [&](int r, tcp_ring_link& l) -> expected<void> {
        if (r == 1) {  // rank 1 sends nothing and keeps its link open until rank 0 has returned
          done.wait();
          return {};
        }
        current.store(2);  // the membership moved on before rank 0 got its data
        std::vector<float> d(10);
        auto res = l.recv({1, 1, 0}, d);
        rank0_done.set_value();
        return res;
      },
      [&](tcp_link_options& o) { o.current_epoch = &current; });
  EXPECT_NE(errs[0].find("membership changed"), std::string::npos) << errs[0];
}

TEST(tcp_ring, mismatched_operations_are_a_protocol_error) {
  ring rg(2);
  auto errs = rg.run([&](int r, tcp_ring_link& l) -> expected<void> {
    std::vector<float> d(64, 1.f);
    if (r == 1) return l.send({1, 5, 0}, d);
    return l.recv({1, 6, 0}, d);
  });
  EXPECT_NE(errs[0].find("unexpected data"), std::string::npos) << errs[0];
  EXPECT_NE(errs[0].find("op 5"), std::string::npos) << errs[0];
}

TEST(tcp_ring, a_killed_neighbour_fails_the_wait_at_once) {
  ring rg(2);
  pid_t child = ::fork();
  if (child == 0) {
    auto l = tcp_ring_link::connect(rg.options(1), *rg.listeners[1]);
    if (!l) _exit(2);
    ::pause();  // linked, sends nothing: SIGKILLed below
    _exit(0);
  }
  auto o = rg.options(0);
  o.timeout = 30s;
  rg.listeners[1].reset();  // the child holds its own copy
  auto link = tcp_ring_link::connect(o, *rg.listeners[0]);
  ASSERT_TRUE(link) << link.err().to_string();
  std::thread killer([&] { ::kill(child, SIGKILL); });
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> d(1000);
  auto res = (*link)->recv({1, 1, 0}, d);
  auto waited = std::chrono::steady_clock::now() - t0;
  killer.join();
  ::waitpid(child, nullptr, 0);
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err().code(), make_error_code(collective_errc::peer_dead)) << res.err().to_string();
  EXPECT_LT(waited, 30s) << "the death was not seen before the operation timeout";
}

// An exchange split over two threads: the caller's half fails (the neighbour sends another
// operation) while the send thread waits for room (the neighbour never reads). The send thread must
// stop at once, and the error returned is the receive's, not the send thread's "stopped".
TEST(tcp_ring, a_failed_receive_stops_the_send_thread_at_once) {
  ring rg(2);
  pid_t child = ::fork();
  if (child == 0) {
    auto l = tcp_ring_link::connect(rg.options(1), *rg.listeners[1]);
    if (!l) _exit(2);
    std::vector<float> d(16, 1.f);
    ::usleep(100 * 1000);  // rank 0's send buffers are full by then
    if (!(*l)->send({1, 99, 0}, d)) _exit(3);
    ::pause();
    _exit(0);
  }
  auto o = rg.options(0);
  o.timeout = 30s;
  o.send_thread_bytes = 4096;
  rg.listeners[1].reset();
  auto link = tcp_ring_link::connect(o, *rg.listeners[0]);
  ASSERT_TRUE(link) << link.err().to_string();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> out(16 << 20, 1.f), in(16 << 20);  // 64 MB: more than the socket buffers hold
  auto res = (*link)->exchange({1, 1, 0}, out, in, true);
  auto waited = std::chrono::steady_clock::now() - t0;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_FALSE(res);
  EXPECT_EQ(res.err().code(), make_error_code(collective_errc::protocol)) << res.err().to_string();
  EXPECT_NE(res.err().to_string().find("op 99"), std::string::npos) << res.err().to_string();
  EXPECT_LT(waited, 10s) << "the send thread waited for the operation timeout";
}

TEST(tcp_ring, stray_connections_are_refused_and_the_ring_still_links) {
  ring rg(2);
  // A connection that is no ring peer, and one naming another epoch, reach rank 1's listener first.
  for (std::uint64_t epoch : {0ull, 7ull}) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(rg.listeners[1]->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    struct {
      std::uint32_t magic;
      std::int32_t rank;
      std::uint64_t epoch;
    } h{epoch ? 0x74726e67u : 0xdeadbeefu, 0, epoch};
    ASSERT_EQ(::send(fd, &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
    // left open: the link must not take it
  }
  auto errs = rg.run([&](int r, tcp_ring_link& l) -> expected<void> {
    std::vector<float> d = rank_data(r, 1000);
    return ring_allreduce(l, r, 2, d, 1, 1);
  });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
}

// `n` connections to `port` on loopback, from strangers: non-blocking, as past the listen backlog
// (16) a connect waits until the link accepts. Fewer when a connect failed (reported).
std::vector<int> strangers(std::uint16_t port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    EXPECT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
    if (rc == 0 || errno == EINPROGRESS) fds.push_back(fd);
  }
  return fds;
}

// Strangers that connect and say nothing (more of them than the listener keeps waiting) are no
// ring peers: the ring links within its rendezvous timeout all the same (a silent connection held the
// accept loop until the deadline).
TEST(tcp_ring, silent_connections_do_not_hold_the_rendezvous) {
  ring rg(2);
  auto silent = strangers(rg.listeners[1]->port(), 20);
  ASSERT_EQ(silent.size(), 20u);
  auto errs = rg.run(
      [&](int r, tcp_ring_link& l) -> expected<void> {
        std::vector<float> d = rank_data(r, 1000);
        return ring_allreduce(l, r, 2, d, 1, 1);
      },
      [](tcp_link_options& o) { o.timeout = 5s; });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
  for (int fd : silent) ::close(fd);
}

// Strangers that connect and trickle bytes, one each (each was read with a wait for the rest of its
// hello: 40 of them stretched one rebuild from under 3 ms to 4.5 s): the waiting connections are read
// as far as they have come, never waited on, and the ring links within a timeout that the waits
// alone (16 waiting at 200 ms each per round) would have outrun.
TEST(tcp_ring, connections_trickling_bytes_do_not_hold_the_rendezvous) {
  ring rg(2);
  auto trickling = strangers(rg.listeners[1]->port(), 40);
  ASSERT_EQ(trickling.size(), 40u);
  std::atomic<bool> done{false};
  std::thread trickle([&] {  // one more byte on each, now and then, until the ring has linked
    while (!done.load()) {
      for (int fd : trickling) (void)::send(fd, "t", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(50ms);
    }
  });
  auto errs = rg.run(
      [&](int r, tcp_ring_link& l) -> expected<void> {
        std::vector<float> d = rank_data(r, 1000);
        return ring_allreduce(l, r, 2, d, 1, 1);
      },
      [](tcp_link_options& o) { o.timeout = 2s; });
  done = true;
  trickle.join();
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
  for (int fd : trickling) ::close(fd);
}

// Rank 0 links epoch 2 while rank 1 still links epoch 1 (it has not seen the change yet): rank 1
// closes rank 0's epoch-2 hello, as a stray, and gives up on epoch 1. Rank 0's link must not be
// taken as made (a rank that closed the hello would look dead at the first transfer, and rank 0
// would never dial again): it dials again until rank 1, now linking epoch 2, welcomes it.
TEST(tcp_ring, a_rank_ahead_dials_again_until_its_next_rank_reaches_the_epoch) {
  ring rg(2);
  std::string late_err;
  std::thread late([&] {
    auto o = rg.options(1, 1);
    o.timeout = 300ms;
    auto stale = tcp_ring_link::connect(o, *rg.listeners[1]);
    late_err = stale ? "" : stale.err().to_string();
  });
  std::string ahead_err;
  std::vector<float> got0;
  std::thread ahead([&] {
    auto link = tcp_ring_link::connect(rg.options(0, 2), *rg.listeners[0]);
    if (!link) return void(ahead_err = link.err().to_string());
    got0 = rank_data(0, 1000);
    if (auto r = ring_allreduce(**link, 0, 2, got0, 2, 1); !r) ahead_err = r.err().to_string();
  });
  late.join();
  EXPECT_NE(late_err, "") << "rank 0 is at epoch 2: epoch 1 cannot link";
  auto link = tcp_ring_link::connect(rg.options(1, 2), *rg.listeners[1]);
  ASSERT_TRUE(link) << link.err().to_string();
  auto got1 = rank_data(1, 1000);
  auto r = ring_allreduce(**link, 1, 2, got1, 2, 1);
  ahead.join();
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_EQ(ahead_err, "");
  auto want = rank_data(0, 1000);
  auto one = rank_data(1, 1000);
  for (size_t i = 0; i < want.size(); ++i) want[i] += one[i];
  EXPECT_EQ(got0, want);
  EXPECT_EQ(got1, want);
}

TEST(tcp_ring, nobody_listening_is_a_clear_error_within_the_timeout) {
  auto l = tcp_listener::open("127.0.0.1");
  ASSERT_TRUE(l);
  std::uint16_t dead_port;
  {
    auto gone = tcp_listener::open("127.0.0.1");
    ASSERT_TRUE(gone);
    dead_port = (*gone)->port();
  }
  tcp_link_options o;
  o.epoch = 1;
  o.rank = 0;
  o.size = 2;
  o.next_address = "127.0.0.1:" + std::to_string(dead_port);
  o.timeout = 300ms;
  auto link = tcp_ring_link::connect(o, **l);
  ASSERT_FALSE(link);
  EXPECT_NE(link.err().to_string().find(o.next_address), std::string::npos) << link.err().to_string();
  o.next_address = "no-port-here";
  link = tcp_ring_link::connect(o, **l);
  ASSERT_FALSE(link);
  EXPECT_NE(link.err().to_string().find("not host:port"), std::string::npos) << link.err().to_string();
}

}  // namespace
}  // namespace troupe::collective
