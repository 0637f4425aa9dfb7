#include "troupe/core/signal_wait.hpp"

#include <semaphore.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>

namespace troupe {

namespace {

constexpr int max_signal = 65;
// Written by the handler, read by wait(): lock-free atomics and sem_post are async-signal-safe.
std::atomic<int> pending[max_signal];
sem_t wake;  // never destroyed: a signal may come while the process ends
std::once_flag wake_init;

extern "C" void on_signal(int sig) {
  if (sig > 0 && sig < max_signal) pending[sig].fetch_add(1, std::memory_order_relaxed);
  ::sem_post(&wake);
}

}  // namespace

signal_waiter::signal_waiter(std::initializer_list<int> signals) {
  std::call_once(wake_init, [] { ::sem_init(&wake, 0, 0); });
  for (int s : signals) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(s, &sa, nullptr);
  }
}

int signal_waiter::poll() {
  for (int s = 1; s < max_signal; ++s)
    if (pending[s].load(std::memory_order_relaxed) > 0) {
      pending[s].fetch_sub(1, std::memory_order_relaxed);
      return s;
    }
  return 0;
}

int signal_waiter::wait() {
  for (;;) {
    if (int s = poll(); s != 0) return s;
    while (::sem_wait(&wake) != 0 && errno == EINTR) {
    }
  }
}

}  // namespace troupe
