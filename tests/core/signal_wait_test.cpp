// signal_waiter: a signal taken by a thread that started before the waiter (as OpenBLAS's pool
// starts before main) wakes the waiter instead of ending the process.
#include "troupe/core/signal_wait.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

namespace troupe {
namespace {

TEST(signal_waiter, a_signal_another_thread_takes_wakes_the_waiter) {
  std::atomic<bool> done{false};
  std::thread early([&] {  // signals unblocked here, as in a library's pool
    while (!done.load()) ::usleep(1000);
  });
  signal_waiter w{SIGTERM, SIGHUP};
  EXPECT_EQ(w.poll(), 0);
  // Blocked on this thread: the kernel must hand the process-directed signal to `early`.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  for (int sig : {SIGTERM, SIGHUP, SIGTERM}) {
    ASSERT_EQ(::kill(::getpid(), sig), 0);
    EXPECT_EQ(w.wait(), sig);
  }
  EXPECT_EQ(w.poll(), 0);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  done = true;
  early.join();
}

TEST(signal_waiter, a_signal_before_the_wait_is_not_lost) {
  signal_waiter w{SIGTERM};
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_EQ(w.wait(), SIGTERM);
}

}  // namespace
}  // namespace troupe
