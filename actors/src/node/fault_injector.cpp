#include "fault_injector.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>

#include "troupe/wire/messages.hpp"

namespace troupe::actors {

fault_injector::~fault_injector() {
  std::lock_guard lk(mu_);
  reset_ = {};  // joins: it may touch the endpoint
}

void fault_injector::handle(const message& m) {
  wire::guarded("inject", [&] {
    auto in = m.body().getJob().getInject();
    fault_injection f;
    f.drop_probability = std::clamp(in.getDropProbability(), 0.0, 1.0);
    f.delay = std::chrono::microseconds(std::min<std::uint64_t>(in.getDelayUs(), 10'000'000));
    auto duration = std::chrono::milliseconds(std::min<std::uint64_t>(in.getDurationMs(), 3'600'000));
    spdlog::warn("fault injection from {}: drop {} delay {} us for {} ms", m.from_node().to_string(),
                 f.drop_probability, f.delay.count(), duration.count());
    inject(f, duration);
  });
}

void fault_injector::inject(const fault_injection& f, std::chrono::milliseconds duration) {
  std::lock_guard lk(mu_);
  // End the older reset first: ended, it clears the fault, which must come before the new one.
  reset_ = {};
  apply_(f);
  // The reset runs on its own thread: the io thread must not block.
  reset_ = std::jthread([this, duration](std::stop_token stop) {
    std::mutex mu;
    std::unique_lock lk(mu);
    std::condition_variable_any cv;
    cv.wait_for(lk, stop, duration, [] { return false; });
    apply_(fault_injection{});
  });
}

}  // namespace troupe::actors
