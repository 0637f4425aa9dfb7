#include "shm/lanes.hpp"

namespace troupe::collective::shm_detail {

lane_crew::lane_crew(int helpers) : slots_(std::make_unique<slot[]>(static_cast<std::size_t>(helpers))) {
  threads_.reserve(static_cast<std::size_t>(helpers));
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
}

lane_crew::~lane_crew() {
  stop_.store(true, std::memory_order_release);
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    slots_[i].go.fetch_add(1, std::memory_order_release);
    slots_[i].go.notify_one();
  }
  for (auto& t : threads_) t.join();
}

void lane_crew::run(int lanes, const std::function<void(int)>& fn) {
  fn_ = &fn;
  ++generation_;
  for (int l = 1; l < lanes; ++l) {
    auto& s = slots_[static_cast<std::size_t>(l - 1)];
    s.go.store(generation_, std::memory_order_release);
    s.go.notify_one();
  }
  fn(0);
  for (int l = 1; l < lanes; ++l) {
    auto& s = slots_[static_cast<std::size_t>(l - 1)];
    for (std::uint32_t d = s.done.load(std::memory_order_acquire); d != generation_;
         d = s.done.load(std::memory_order_acquire))
      s.done.wait(d, std::memory_order_acquire);
  }
}

void lane_crew::loop(int lane) {
  auto& s = slots_[static_cast<std::size_t>(lane - 1)];
  std::uint32_t seen = 0;
  for (;;) {
    s.go.wait(seen, std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    seen = s.go.load(std::memory_order_acquire);
    (*fn_)(lane);
    s.done.store(seen, std::memory_order_release);
    s.done.notify_one();
  }
}

}  // namespace troupe::collective::shm_detail
