#include "troupe/core/small_mutex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace troupe {

namespace {
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

void futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value) noexcept {
  // The futex word is the atomic's own 4 bytes; a wait returns at once (EAGAIN) when the word no
  // longer holds `value`, and spuriously at any time: the caller loops.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op | FUTEX_PRIVATE_FLAG, value, nullptr,
            nullptr, 0);
}
}  // namespace

void small_mutex::contended(std::uint32_t seen) noexcept {
  // From here on the word says "waiting" whenever this thread may sleep, so that the unlock that
  // lets it go wakes someone. (Taking the lock as "waiting" may cost one needless wake later.)
  if (seen != waiting) seen = state_.exchange(waiting, std::memory_order_acquire);
  while (seen != unlocked) {
    futex(state_, FUTEX_WAIT, waiting);
    seen = state_.exchange(waiting, std::memory_order_acquire);
  }
}

void small_mutex::wake() noexcept {
  futex(state_, FUTEX_WAKE, 1);
}

}  // namespace troupe
