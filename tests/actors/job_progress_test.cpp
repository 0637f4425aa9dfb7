// The master's progress window (master/job_progress.hpp): totals, samples/s and loss per window,
// the earliest first step, and the totals a restarted master continues.
#include <gtest/gtest.h>

#include <cmath>

#include "master/job_progress.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

TEST(job_progress, a_window_closes_after_a_second_with_rate_and_mean_loss) {
  manual_clock clk;
  job_progress p(clk.now());
  EXPECT_TRUE(std::isnan(p.loss()));
  p.add(100, 4, 8.0, 0, 0);
  p.add(60, 2, 2.0, 1, 0);
  EXPECT_DOUBLE_EQ(p.last_loss(), 10.0 / 6);  // the window under way
  clk.advance(500ms);
  p.roll(clk.now());  // under a second: still open
  EXPECT_EQ(p.samples_per_sec(), 0.0);
  clk.advance(1500ms);
  p.roll(clk.now());
  EXPECT_DOUBLE_EQ(p.samples_per_sec(), 80.0);
  EXPECT_DOUBLE_EQ(p.loss(), 10.0 / 6);
  EXPECT_EQ(p.samples_total(), 160u);
  EXPECT_EQ(p.dropped_steps(), 1u);
}

TEST(job_progress, a_window_without_steps_keeps_the_last_loss) {
  manual_clock clk;
  job_progress p(clk.now());
  p.add(10, 1, 3.0, 0, 0);
  clk.advance(1s);
  p.roll(clk.now());
  clk.advance(1s);
  p.roll(clk.now());
  EXPECT_DOUBLE_EQ(p.loss(), 3.0);
  EXPECT_DOUBLE_EQ(p.last_loss(), 3.0);
  EXPECT_EQ(p.samples_per_sec(), 0.0);
}

TEST(job_progress, keeps_the_earliest_first_step_and_continues_saved_totals) {
  job_progress p;
  p.restore({500, 3, 2000, 1});
  p.add(10, 1, 1.0, 0, 0);     // 0: not sent
  p.add(10, 1, 1.0, 0, 2500);  // later than the saved one
  EXPECT_EQ(p.first_step_wall_ms(), 2000u);
  p.add(10, 1, 1.0, 0, 1500);
  EXPECT_EQ(p.first_step_wall_ms(), 1500u);
  auto c = p.counters(2);
  EXPECT_EQ(c.samples_trained, 530u);
  EXPECT_EQ(c.dropped_steps, 3u);
  EXPECT_EQ(c.first_step_wall_ms, 1500u);
  EXPECT_EQ(c.master_starts, 2u);
}

}  // namespace
}  // namespace troupe::actors
