// The pure timing policies: backoff_policy and intensity_window.
#include <gtest/gtest.h>

#include "troupe/supervision/backoff.hpp"

namespace troupe::supervision {
namespace {

using namespace std::chrono_literals;

TEST(backoff_policy, nominal_doubles_from_base_and_is_capped) {
  backoff_policy p{100ms, 1s, 0.0};
  EXPECT_EQ(p.nominal(0), 100ms);
  EXPECT_EQ(p.nominal(1), 200ms);
  EXPECT_EQ(p.nominal(3), 800ms);
  EXPECT_EQ(p.nominal(4), 1s);
  EXPECT_EQ(p.nominal(1000), 1s) << "no overflow for huge attempt counts";
}

TEST(backoff_policy, zero_base_means_immediate_restarts) {
  backoff_policy p{0ms, 1s, 0.5};
  std::mt19937_64 rng(1);
  EXPECT_EQ(p.delay(5, rng), 0ms);
}

TEST(backoff_policy, without_jitter_delay_is_nominal) {
  backoff_policy p{50ms, 10s, 0.0};
  std::mt19937_64 rng(1);
  for (std::uint32_t k = 0; k < 10; ++k) EXPECT_EQ(p.delay(k, rng), p.nominal(k));
}

TEST(backoff_policy, jitter_stays_within_bounds_and_spreads) {
  backoff_policy p{100ms, 2s, 0.3};
  std::mt19937_64 rng(7);
  for (std::uint32_t k = 0; k < 8; ++k) {
    duration lo = p.nominal(k), hi = duration::zero();
    for (int i = 0; i < 1000; ++i) {
      auto d = p.delay(k, rng);
      ASSERT_GE(d, p.min_delay(k));
      ASSERT_LE(d, p.nominal(k));
      ASSERT_LE(d, p.max);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    // 1000 uniform draws cover most of the 30% band.
    EXPECT_LT(lo, p.min_delay(k) + (p.nominal(k) - p.min_delay(k)) / 10) << k;
    EXPECT_GT(hi, p.nominal(k) - (p.nominal(k) - p.min_delay(k)) / 10) << k;
  }
  EXPECT_EQ(p.min_delay(0), 70ms);
}

TEST(backoff_policy, same_seed_same_delays) {
  backoff_policy p{100ms, 2s, 0.5};
  std::mt19937_64 a(99), b(99);
  for (std::uint32_t k = 0; k < 20; ++k) EXPECT_EQ(p.delay(k, a), p.delay(k, b));
}

using tp = intensity_window::time_point;

TEST(intensity_window, allows_max_restarts_then_refuses) {
  intensity_window w(3, 10s);
  tp t0{};
  EXPECT_TRUE(w.record(t0));
  EXPECT_TRUE(w.record(t0 + 1s));
  EXPECT_TRUE(w.record(t0 + 2s));
  EXPECT_FALSE(w.record(t0 + 3s));
  EXPECT_EQ(w.count(t0 + 3s), 3u) << "a refused restart is not counted";
}

TEST(intensity_window, old_restarts_expire) {
  intensity_window w(2, 10s);
  tp t0{};
  EXPECT_TRUE(w.record(t0));
  EXPECT_TRUE(w.record(t0 + 5s));
  EXPECT_FALSE(w.record(t0 + 9s));
  EXPECT_TRUE(w.record(t0 + 10s)) << "the one at t0 left the window";
  EXPECT_EQ(w.count(t0 + 15s), 1u);
  EXPECT_EQ(w.count(t0 + 30s), 0u);
}

TEST(intensity_window, zero_allows_nothing) {
  intensity_window w(0, 1s);
  EXPECT_FALSE(w.record(tp{}));
}

}  // namespace
}  // namespace troupe::supervision
