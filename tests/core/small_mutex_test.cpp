// small_mutex: mutual exclusion under contention, a sleeper that wakes on unlock, try_lock, and
// std::condition_variable_any on top of it (the transport's senders waiting for room do that).
#include "troupe/core/small_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe {
namespace {

using namespace std::chrono_literals;

TEST(small_mutex, no_increment_is_lost_when_threads_contend) {
  small_mutex mu;
  // Not atomic: read and write apart, with a yield between, so that two holders at once would
  // lose increments (a broken lock fails this on one core as well as on many).
  std::uint64_t counter = 0;
  constexpr int threads = 4, rounds = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        std::lock_guard lk(mu);
        auto v = counter;
        if (i % 64 == 0) std::this_thread::yield();
        counter = v + 1;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, std::uint64_t{threads} * rounds);
}

TEST(small_mutex, a_thread_that_finds_it_taken_waits_until_it_is_unlocked) {
  small_mutex mu;
  mu.lock();
  std::atomic<bool> got{false};
  std::thread t([&] {
    mu.lock();
    got = true;
    mu.unlock();
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(got.load());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

TEST(small_mutex, condition_variable_any_waits_on_it) {
  small_mutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    std::lock_guard lk(mu);
    ready = true;
    cv.notify_all();
  });
  std::unique_lock lk(mu);
  EXPECT_TRUE(cv.wait_for(lk, 10s, [&] { return ready; }));
  lk.unlock();
  t.join();
  std::unique_lock lk2(mu);
  EXPECT_FALSE(cv.wait_for(lk2, 20ms, [] { return false; }));  // a timeout gives the lock back
  EXPECT_TRUE(lk2.owns_lock());
}

}  // namespace
}  // namespace troupe
