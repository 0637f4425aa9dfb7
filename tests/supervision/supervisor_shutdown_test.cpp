// Ordered shutdown: reverse start order, one child at a time, kill after the shutdown timeout.
#include "det_fixture.hpp"

namespace troupe::supervision::test {
namespace {

using shutdown_test = det_fixture;
using strings = std::vector<std::string>;

TEST_F(shutdown_test, stops_children_in_reverse_start_order_then_exits_with_the_reason) {
  auto sup = start(config(), {test_spec("a"), test_spec("b"), test_spec("c")});
  auto down = watch(sup);
  auto m = mark();
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  EXPECT_EQ(trace(m), (strings{"child_exited:c", "child_exited:b", "child_exited:a", "stopped:"}));
  ASSERT_TRUE(down->reason);
  EXPECT_EQ(*down->reason, caf::error(caf::exit_reason::user_shutdown));
  EXPECT_TRUE(of_kind(event_kind::restart_scheduled).empty()) << "no restarts while stopping";
  EXPECT_TRUE(names_.names().empty());
}

TEST_F(shutdown_test, a_child_that_ignores_exit_is_killed_after_its_shutdown_timeout) {
  auto sup = start(config(), {test_spec("a"), test_spec("stubborn", restart_type::permanent, true, 2000ms),
                              test_spec("c")});
  auto down = watch(sup);
  auto stubborn = watch(names_.get("stubborn"));
  auto m = mark();
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  EXPECT_EQ(trace(m), (strings{"child_exited:c"}));
  EXPECT_TRUE(names_.get("stubborn")) << "still alive: it ignored the exit request";
  EXPECT_TRUE(names_.get("a")) << "a waits for stubborn (one at a time, in order)";
  advance(1999ms);
  EXPECT_FALSE(stubborn->reason);
  advance(1ms);
  EXPECT_EQ(trace(m), (strings{"child_exited:c", "child_killed:stubborn", "child_exited:stubborn",
                               "child_exited:a", "stopped:"}));
  ASSERT_TRUE(stubborn->reason);
  EXPECT_EQ(*stubborn->reason, caf::error(caf::exit_reason::kill));
  EXPECT_TRUE(down->reason);
}

TEST_F(shutdown_test, zero_shutdown_timeout_kills_at_once) {
  auto sup = start(config(), {test_spec("brutal", restart_type::permanent, true, 0ms)});
  auto down = watch(sup);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  EXPECT_TRUE(down->reason);
  EXPECT_EQ(of_kind(event_kind::child_killed).size(), 1u);
}

TEST_F(shutdown_test, killing_the_supervisor_kills_its_children) {
  auto sup = start(config(), {test_spec("a"), test_spec("b", restart_type::permanent, true)});
  auto a = watch(names_.get("a"));
  auto b = watch(names_.get("b"));
  caf::anon_send_exit(sup, caf::exit_reason::kill);
  run();
  ASSERT_TRUE(a->reason && b->reason);
  EXPECT_EQ(*b->reason, caf::error(caf::exit_reason::kill));
  EXPECT_FALSE(names_.get("a") || names_.get("b"));
}

TEST_F(shutdown_test, restart_pending_at_shutdown_is_cancelled) {
  auto c = config();
  c.backoff.base = 1s;
  c.backoff.max = 1s;
  auto sup = start(c, {test_spec("a"), test_spec("b")});
  auto down = watch(sup);
  tell("a", crash_atom::value);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  ASSERT_TRUE(down->reason);
  advance(2s);
  EXPECT_FALSE(names_.get("a")) << "the backoff timer fired after shutdown and must do nothing";
  EXPECT_EQ(of_kind(event_kind::child_started).size(), 2u);
}

}  // namespace
}  // namespace troupe::supervision::test
