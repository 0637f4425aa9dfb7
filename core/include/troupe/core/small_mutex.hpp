// A mutex of 4 bytes (glibc's std::mutex is 40) for objects kept by the thousand: a master holds
// one transport connection per member, each with a lock on its send queue. Uncontended it is one
// atomic exchange each way; a thread that finds it taken sleeps on a futex (Drepper, "Futexes Are
// Tricky", 2011: mutex3). Not recursive; it meets Lockable, so std::lock_guard, std::unique_lock
// and std::condition_variable_any work with it.
#pragma once

#include <atomic>
#include <cstdint>

namespace troupe {

class small_mutex {
 public:
  small_mutex() = default;
  small_mutex(const small_mutex&) = delete;
  small_mutex& operator=(const small_mutex&) = delete;

  void lock() noexcept {
    std::uint32_t c = unlocked;
    if (state_.compare_exchange_strong(c, locked, std::memory_order_acquire)) return;
    contended(c);
  }
  bool try_lock() noexcept {
    std::uint32_t c = unlocked;
    return state_.compare_exchange_strong(c, locked, std::memory_order_acquire);
  }
  void unlock() noexcept {
    if (state_.exchange(unlocked, std::memory_order_release) == waiting) wake();
  }

 private:
  static constexpr std::uint32_t unlocked = 0, locked = 1, waiting = 2;  // 2: locked, maybe sleepers
  void contended(std::uint32_t seen) noexcept;                           // sleeps until it holds the lock
  void wake() noexcept;                                                  // wakes one sleeper
  std::atomic<std::uint32_t> state_{unlocked};
};

static_assert(sizeof(small_mutex) == 4);

}  // namespace troupe
