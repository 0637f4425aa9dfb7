#include "troupe/core/log_limit.hpp"

#include <gtest/gtest.h>

namespace troupe {
namespace {

using namespace std::chrono_literals;

TEST(log_limit, logs_the_first_of_a_window_and_sums_up_the_rest_when_it_ends) {
  log_limit l(3, 10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  int logged = 0;
  for (int i = 0; i < 1000; ++i) {
    auto v = l.note(t0 + i * 1ms);
    EXPECT_TRUE(v.summary.empty());
    logged += v.log;
  }
  EXPECT_EQ(logged, 3);
  EXPECT_EQ(l.held_back(), 997u);
  EXPECT_EQ(l.flush(t0 + 5s), "") << "the window is not over";
  EXPECT_EQ(l.window_end(), t0 + 10s);
  EXPECT_EQ(l.flush(t0 + 10s), "... and 997 more like this in the last 10 s");
  EXPECT_EQ(l.held_back(), 0u);
  EXPECT_EQ(l.flush(t0 + 30s), "") << "told once";
  // A new window: the first ones are logged again.
  EXPECT_TRUE(l.note(t0 + 31s).log);
}

TEST(log_limit, the_next_occurrence_after_a_window_carries_its_summary) {
  log_limit l(1, 10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  EXPECT_TRUE(l.note(t0).log);
  EXPECT_FALSE(l.note(t0 + 1s).log);
  EXPECT_FALSE(l.note(t0 + 2s).log);
  auto v = l.note(t0 + 12s);
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.summary, "... and 2 more like this in the last 12 s");
}

TEST(log_limit, flush_now_anyway_tells_the_current_window_at_shutdown) {
  log_limit l(1, 10s);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  l.note(t0);
  EXPECT_EQ(l.flush(t0 + 1s, true), "") << "nothing held back";
  l.note(t0 + 2s);
  EXPECT_EQ(l.flush(t0 + 3s, true), "... and 1 more like this in the last 3 s");
}

TEST(printable_text, escapes_what_is_not_printable_ascii_and_cuts_long_text) {
  EXPECT_EQ(printable_text("expected == '\\0' [\xdc == \x01]", 100), "expected == '\\0' [\\xdc == \\x01]");
  EXPECT_EQ(printable_text("line\nnext", 100), "line\\x0anext");
  EXPECT_EQ(printable_text(std::string(500, 'a'), 300), std::string(300, 'a') + "...");
}

}  // namespace
}  // namespace troupe
