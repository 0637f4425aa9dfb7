// The threads that move lanes 1..n-1 of a shared-memory transfer while the caller moves lane 0
// (shm/link.hpp). Each helper waits on a word of its own (a futex through std::atomic::wait), so a
// transfer wakes only the helpers it uses and a helper it does not use never sees its work.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace troupe::collective::shm_detail {

class lane_crew {
 public:
  explicit lane_crew(int helpers);
  ~lane_crew();
  lane_crew(const lane_crew&) = delete;
  lane_crew& operator=(const lane_crew&) = delete;
  int helpers() const noexcept { return static_cast<int>(threads_.size()); }
  // Runs fn(1..lanes-1) on the helpers and fn(0) on this thread; returns when all have returned.
  // lanes - 1 <= helpers(). fn must not throw.
  void run(int lanes, const std::function<void(int)>& fn);

 private:
  struct slot {
    std::atomic<std::uint32_t> go{0};    // the generation this helper is to run
    std::atomic<std::uint32_t> done{0};  // the last generation it finished
  };
  void loop(int lane);
  std::unique_ptr<slot[]> slots_;  // slots_[i] is lane i + 1's
  std::vector<std::thread> threads_;
  const std::function<void(int)>* fn_ = nullptr;  // written before a go, read after it
  std::uint32_t generation_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace troupe::collective::shm_detail
