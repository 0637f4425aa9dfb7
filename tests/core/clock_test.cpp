#include <gtest/gtest.h>

#include <thread>

#include "troupe/core/clock.hpp"

namespace troupe {
namespace {

TEST(manual_clock, moves_only_when_told) {
  manual_clock c(1000);
  auto t0 = c.now();
  EXPECT_EQ(c.now(), t0);
  c.advance(std::chrono::milliseconds(5));
  EXPECT_EQ(c.now() - t0, std::chrono::milliseconds(5));
  EXPECT_EQ(c.wall_ms(), 1005);
  c.sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(c.wall_ms(), 2005);
}

TEST(manual_clock, a_stoppable_sleep_advances_it_unless_stopped) {
  manual_clock c(0);
  std::stop_source stop;
  EXPECT_TRUE(c.sleep_for(std::chrono::seconds(3), stop.get_token()));
  EXPECT_EQ(c.wall_ms(), 3000);
  stop.request_stop();
  EXPECT_FALSE(c.sleep_for(std::chrono::seconds(3), stop.get_token()));
  EXPECT_EQ(c.wall_ms(), 3000);
}

TEST(system_clock, a_stoppable_sleep_ends_when_stop_is_requested) {
  std::stop_source stop;
  std::jthread stopper([&] { stop.request_stop(); });
  EXPECT_FALSE(clock::system().sleep_for(std::chrono::hours(1), stop.get_token()));
  EXPECT_TRUE(clock::system().sleep_for(std::chrono::milliseconds(1), std::stop_source().get_token()));
}

TEST(system_clock, is_monotonic) {
  auto& c = clock::system();
  auto a = c.now();
  c.sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(c.now() - a, std::chrono::milliseconds(2));
  EXPECT_GT(c.wall_ms(), 1'600'000'000'000);
}

}  // namespace
}  // namespace troupe
