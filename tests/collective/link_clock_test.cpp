// The ring links' operation timeout on the clock they are given (tcp_link_options::clock,
// shm_link_options::clock): rank 0 waits for a previous rank that sends nothing, on a manual clock.
// Moved to just before the deadline, the wait goes on (the data that then comes is taken); moved past
// it, the wait fails with `timeout` at once. No real time passes for the 10-minute timeout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "troupe/collective/shm/link.hpp"
#include "troupe/collective/tcp/link.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::collective {
namespace {

using namespace std::chrono_literals;

constexpr auto op_timeout = std::chrono::minutes(10);

// A manual clock that counts its reads, so a test knows the waiter has looked at the clock since it
// was moved (a read after the move), without sleeping.
class counting_clock final : public troupe::clock {
 public:
  time_point now() const override {
    reads_.fetch_add(1);
    return inner_.now();
  }
  std::int64_t wall_ms() const override { return inner_.wall_ms(); }
  void sleep_for(duration d) override { inner_.sleep_for(d); }
  bool sleep_for(duration d, const std::stop_token& stop) override { return inner_.sleep_for(d, stop); }
  void advance(duration d) { inner_.advance(d); }
  // Waits (in real time, 5 s at most) until the clock has been read twice more: a waiter that
  // reads it in its loop has gone round at least once since.
  void see_reads() const {
    const int before = reads_.load();
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (reads_.load() < before + 2 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
  }
  // Moves the clock by `d` and waits until the waiter has looked at the new time.
  void advance_and_see_read(duration d) {
    advance(d);
    see_reads();
  }

 private:
  manual_clock inner_;
  mutable std::atomic<int> reads_{0};
};

// Runs the two ops of every test on rank 0's link `l` while rank 1's link `peer` sends only the
// first op's data, and only when the test says.
template <class Link>
void expect_timeout_on_the_clock(counting_clock& clk, Link& l, Link& peer) {
  const auto real_start = std::chrono::steady_clock::now();
  std::vector<float> got(16), sent(16, 2.f);
  // Op 1: just before its deadline it still waits; the data that then comes is taken.
  auto first = std::async(std::launch::async, [&] { return l.recv({1, 1, 0}, got); });
  clk.see_reads();  // the op has started (its deadline is set) and waits
  clk.advance_and_see_read(op_timeout - 1ms);
  ASSERT_TRUE(peer.send({1, 1, 0}, sent));
  auto r1 = first.get();
  ASSERT_TRUE(r1) << "timed out before its deadline: " << r1.err().to_string();
  EXPECT_EQ(got, sent);
  // Op 2: nothing comes; moved past its deadline (10 min from the op's start), it fails with timeout.
  auto second = std::async(std::launch::async, [&] { return l.recv({1, 1, 1}, got); });
  clk.see_reads();
  clk.advance_and_see_read(op_timeout - 1ms);
  clk.advance(2ms);
  auto r2 = second.get();
  ASSERT_FALSE(r2);
  EXPECT_TRUE(r2.err() == collective_errc::timeout) << r2.err().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - real_start, 30s) << "waited in real time";
}

TEST(link_clock, tcp_a_silent_previous_rank_fails_the_wait_past_the_timeout_on_the_links_clock) {
  counting_clock clk;
  std::unique_ptr<tcp_listener> listeners[2];
  for (auto& l : listeners) {
    auto made = tcp_listener::open("127.0.0.1");
    ASSERT_TRUE(made) << made.err().to_string();
    l = std::move(*made);
  }
  auto connect = [&](int rank) {
    tcp_link_options o;
    o.epoch = 1;
    o.rank = rank;
    o.size = 2;
    o.next_address = "127.0.0.1:" + std::to_string(listeners[1 - rank]->port());
    o.timeout = op_timeout;
    if (rank == 0) o.clock = clk;  // rank 1 (the silent one) keeps the real clock
    return tcp_ring_link::connect(o, *listeners[rank]);
  };
  auto peer = std::async(std::launch::async, connect, 1);
  auto l = connect(0);
  auto p = peer.get();
  ASSERT_TRUE(l) << l.err().to_string();
  ASSERT_TRUE(p) << p.err().to_string();
  expect_timeout_on_the_clock(clk, **l, **p);
}

TEST(link_clock, shm_a_silent_previous_rank_fails_the_wait_past_the_timeout_on_the_links_clock) {
  counting_clock clk;
  const std::string job = "clock" + std::to_string(::getpid());
  auto connect = [&](int rank) {
    shm_link_options o;
    o.job = job;
    o.epoch = 1;
    o.rank = rank;
    o.size = 2;
    o.capacity = 64 << 10;
    o.timeout = op_timeout;
    if (rank == 0) o.clock = clk;
    return shm_ring_link::connect(o);
  };
  auto peer = std::async(std::launch::async, connect, 1);
  auto l = connect(0);
  auto p = peer.get();
  ASSERT_TRUE(l) << l.err().to_string();
  ASSERT_TRUE(p) << p.err().to_string();
  expect_timeout_on_the_clock(clk, **l, **p);
}

}  // namespace
}  // namespace troupe::collective
