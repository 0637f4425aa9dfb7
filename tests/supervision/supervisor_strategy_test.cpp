// Strategies and restart types on the deterministic coordinator.
#include <map>

#include "det_fixture.hpp"

namespace troupe::supervision::test {
namespace {

using strategy_test = det_fixture;
using strings = std::vector<std::string>;

TEST_F(strategy_test, one_for_one_restarts_only_the_failed_child) {
  start(config(strategy::one_for_one), {test_spec("a"), test_spec("b"), test_spec("c")});
  auto a = names_.get("a"), b = names_.get("b"), c = names_.get("c");
  ASSERT_TRUE(a && b && c);
  auto m = mark();
  tell("b", crash_atom::value);
  EXPECT_EQ(trace(m), (strings{"child_exited:b", "restart_scheduled:b", "child_started:b"}));
  EXPECT_EQ(names_.get("a"), a);
  EXPECT_EQ(names_.get("c"), c);
  auto b2 = names_.get("b");
  ASSERT_TRUE(b2);
  EXPECT_NE(b2, b);
  EXPECT_NE(b2.id(), b.id());
  auto inc = ask<std::uint32_t>(b2, ping_atom::value);
  ASSERT_TRUE(inc);
  EXPECT_EQ(*inc, 1u);
}

TEST_F(strategy_test, one_for_all_stops_siblings_in_reverse_order_and_restarts_all_in_order) {
  start(config(strategy::one_for_all), {test_spec("a"), test_spec("b"), test_spec("c")});
  auto a = names_.get("a"), c = names_.get("c");
  auto m = mark();
  tell("b", crash_atom::value);
  EXPECT_EQ(trace(m), (strings{"child_exited:b", "restart_scheduled:b", "child_exited:c", "child_exited:a",
                               "child_started:a", "child_started:b", "child_started:c"}));
  EXPECT_NE(names_.get("a"), a);
  EXPECT_NE(names_.get("c"), c);
  EXPECT_TRUE(names_.get("a") && names_.get("b") && names_.get("c"));
}

TEST_F(strategy_test, rest_for_one_restarts_the_failed_child_and_those_started_after_it) {
  start(config(strategy::rest_for_one), {test_spec("a"), test_spec("b"), test_spec("c"), test_spec("d")});
  auto a = names_.get("a"), c = names_.get("c"), d = names_.get("d");
  auto m = mark();
  tell("b", crash_atom::value);
  EXPECT_EQ(trace(m), (strings{"child_exited:b", "restart_scheduled:b", "child_exited:d", "child_exited:c",
                               "child_started:b", "child_started:c", "child_started:d"}));
  EXPECT_EQ(names_.get("a"), a);
  EXPECT_NE(names_.get("c"), c);
  EXPECT_NE(names_.get("d"), d);
}

TEST_F(strategy_test, one_for_all_drops_a_temporary_sibling_instead_of_restarting_it) {
  auto sup = start(config(strategy::one_for_all), {test_spec("a", restart_type::temporary), test_spec("b")});
  tell("b", crash_atom::value);
  EXPECT_FALSE(names_.get("a"));
  EXPECT_TRUE(names_.get("b"));
  auto kids = ask<std::vector<child_info>>(sup, which_children_atom::value);
  ASSERT_TRUE(kids);
  ASSERT_EQ(kids->size(), 1u);
  EXPECT_EQ((*kids)[0].name, "b");
  EXPECT_EQ((*kids)[0].restarts, 1u);
}

TEST_F(strategy_test, one_for_all_failure_during_a_group_stop_restarts_the_group_once) {
  start(config(strategy::one_for_all),
        {test_spec("a"), test_spec("b"), test_spec("c", restart_type::permanent, true, 1000ms)});
  tell("a", crash_atom::value);  // stops c (stubborn: 1 s), then b
  EXPECT_TRUE(names_.get("b") && names_.get("c"));
  tell("b", crash_atom::value);  // b fails on its own while c is being stopped
  EXPECT_FALSE(names_.get("a") || names_.get("b")) << "nothing restarts before c is down";
  advance(1000ms);
  ASSERT_TRUE(names_.get("a") && names_.get("b") && names_.get("c"));
  std::map<std::string, int> starts;
  for (auto& e : of_kind(event_kind::child_started)) ++starts[e.child];
  EXPECT_EQ(starts, (std::map<std::string, int>{{"a", 2}, {"b", 2}, {"c", 2}}));
}

TEST_F(strategy_test, permanent_child_is_restarted_after_a_normal_exit) {
  start(config(), {test_spec("p", restart_type::permanent)});
  auto p = names_.get("p");
  tell("p", leave_atom::value);
  EXPECT_TRUE(names_.get("p"));
  EXPECT_NE(names_.get("p"), p);
}

TEST_F(strategy_test, transient_child_is_not_restarted_after_a_normal_exit) {
  auto sup = start(config(), {test_spec("t", restart_type::transient), test_spec("x")});
  tell("t", leave_atom::value);
  EXPECT_FALSE(names_.get("t"));
  EXPECT_TRUE(of_kind(event_kind::restart_scheduled).empty());
  auto n = ask<child_counts>(sup, count_children_atom::value);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->specs, 1u);
}

TEST_F(strategy_test, transient_child_is_restarted_after_a_crash) {
  start(config(), {test_spec("t", restart_type::transient)});
  auto t = names_.get("t");
  tell("t", crash_atom::value);
  ASSERT_TRUE(names_.get("t"));
  EXPECT_NE(names_.get("t"), t);
}

TEST_F(strategy_test, temporary_child_is_never_restarted_and_is_forgotten) {
  auto sup = start(config(), {test_spec("tmp", restart_type::temporary), test_spec("x")});
  tell("tmp", crash_atom::value);
  EXPECT_FALSE(names_.get("tmp"));
  EXPECT_TRUE(of_kind(event_kind::restart_scheduled).empty());
  auto kids = ask<std::vector<child_info>>(sup, which_children_atom::value);
  ASSERT_TRUE(kids);
  ASSERT_EQ(kids->size(), 1u);
  EXPECT_EQ((*kids)[0].name, "x");
}

TEST_F(strategy_test, restarted_child_is_re_registered_and_subscribers_are_told) {
  start(config(), {test_spec("worker/7")});
  auto before = names_.get("worker/7");
  auto gen = names_.generation("worker/7");
  std::vector<caf::actor> seen;
  auto sub =
      names_.subscribe("worker/7", [&](const std::string&, const caf::actor& a) { seen.push_back(a); });
  tell("worker/7", crash_atom::value);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0]);  // taken off when it died
  EXPECT_TRUE(seen[1]);   // the replacement
  EXPECT_NE(seen[1], before);
  EXPECT_EQ(names_.get("worker/7"), seen[1]);
  EXPECT_EQ(names_.generation("worker/7"), gen + 1);
}

TEST_F(strategy_test, factory_that_throws_at_restart_counts_as_a_failure_and_is_retried) {
  auto fail_next = std::make_shared<int>(0);
  auto spec = test_spec("flaky");
  auto inner = spec.start;
  spec.start = [fail_next, inner](spawn_context& ctx) -> caf::actor {
    if (*fail_next > 0) {
      --*fail_next;
      throw std::runtime_error("no GPU today");
    }
    return inner(ctx);
  };
  start(config(), {spec});
  *fail_next = 2;
  tell("flaky", crash_atom::value);
  auto failed = of_kind(event_kind::start_failed);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed[0].reason.find("no GPU today"), std::string::npos);
  ASSERT_TRUE(names_.get("flaky"));
  EXPECT_EQ(of_kind(event_kind::restart_scheduled).size(), 3u);
}

}  // namespace
}  // namespace troupe::supervision::test
