// Backoff between restarts as the supervisor applies it, in virtual time.
#include "det_fixture.hpp"

namespace troupe::supervision::test {
namespace {

using backoff_test = det_fixture;

supervisor_config with_backoff(supervisor_config c, duration base, duration max, double jitter) {
  c.backoff.base = base;
  c.backoff.max = max;
  c.backoff.jitter = jitter;
  return c;
}

TEST_F(backoff_test, restart_happens_exactly_after_the_exponential_capped_delay) {
  start(with_backoff(config(), 100ms, 400ms, 0.0), {test_spec("a")});
  std::vector<duration> expected = {100ms, 200ms, 400ms, 400ms};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    tell("a", crash_atom::value);
    auto sched = of_kind(event_kind::restart_scheduled);
    ASSERT_EQ(sched.size(), i + 1);
    EXPECT_EQ(sched.back().delay, expected[i]) << "restart " << i;
    EXPECT_FALSE(names_.get("a")) << "down while waiting";
    advance(expected[i] - 1ms);
    EXPECT_FALSE(names_.get("a")) << "restarted " << i << " too early";
    advance(1ms);
    ASSERT_TRUE(names_.get("a")) << "not restarted after " << expected[i].count() << " ns";
  }
}

TEST_F(backoff_test, jittered_delays_stay_within_bounds_and_follow_the_seed) {
  auto c = with_backoff(config(), 100ms, 1600ms, 0.5);
  auto run_once = [&](std::string name) {
    start(c, {test_spec(name)});
    std::vector<duration> delays;
    for (int i = 0; i < 6; ++i) {
      tell(name, crash_atom::value);
      delays.push_back(of_kind(event_kind::restart_scheduled).back().delay);
      advance(2s);
    }
    return delays;
  };
  auto first = run_once("a");
  auto second = run_once("b");
  EXPECT_EQ(first, second) << "the same seed gives the same delays";
  bool any_jitter = false;
  for (std::uint32_t k = 0; k < first.size(); ++k) {
    EXPECT_GE(first[k], c.backoff.min_delay(k)) << k;
    EXPECT_LE(first[k], c.backoff.nominal(k)) << k;
    EXPECT_LE(first[k], c.backoff.max);
    any_jitter = any_jitter || first[k] != c.backoff.nominal(k);
  }
  EXPECT_TRUE(any_jitter);
  c.seed = 43;
  EXPECT_NE(run_once("c"), first) << "another seed, other delays";
}

TEST_F(backoff_test, backoff_starts_again_from_base_after_a_stable_run) {
  auto c = with_backoff(config(), 100ms, 10s, 0.0);
  c.backoff_reset_after = 5s;
  start(c, {test_spec("a")});
  tell("a", crash_atom::value);
  advance(100ms);
  tell("a", crash_atom::value);
  EXPECT_EQ(of_kind(event_kind::restart_scheduled).back().delay, 200ms);
  advance(200ms);
  advance(5s);  // ran for 5 s: stable
  tell("a", crash_atom::value);
  EXPECT_EQ(of_kind(event_kind::restart_scheduled).back().delay, 100ms);
}

TEST_F(backoff_test, one_for_all_waits_the_backoff_after_stopping_the_siblings) {
  start(with_backoff(config(strategy::one_for_all), 300ms, 1s, 0.0), {test_spec("a"), test_spec("b")});
  tell("a", crash_atom::value);
  EXPECT_FALSE(names_.get("a"));
  EXPECT_FALSE(names_.get("b")) << "sibling stopped";
  advance(299ms);
  EXPECT_FALSE(names_.get("a") || names_.get("b"));
  advance(1ms);
  EXPECT_TRUE(names_.get("a") && names_.get("b"));
}

}  // namespace
}  // namespace troupe::supervision::test
