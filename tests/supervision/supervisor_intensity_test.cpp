// Intensity limits, giving up, escalation to a parent supervisor and to the node root's hook.
#include "det_fixture.hpp"
#include "troupe/supervision/node_root.hpp"

namespace troupe::supervision::test {
namespace {

using intensity_test = det_fixture;

TEST_F(intensity_test, gives_up_past_max_restarts_stops_children_and_exits_with_intensity_exceeded) {
  auto c = config();
  c.max_restarts = 2;
  c.window = 10s;
  auto sup = start(c, {test_spec("a"), test_spec("b")});
  auto down = watch(sup);
  tell("b", crash_atom::value);
  tell("b", crash_atom::value);
  EXPECT_FALSE(down->reason) << "two restarts are within the limit";
  tell("b", crash_atom::value);
  ASSERT_TRUE(down->reason) << "the third failure within the window must make it give up";
  EXPECT_EQ(supervision_code(*down->reason), supervision_errc::intensity_exceeded);
  auto text = sys_.render(*down->reason);
  EXPECT_NE(text.find("restart intensity exceeded"), std::string::npos) << text;
  EXPECT_NE(text.find("child 'b'"), std::string::npos) << text;
  EXPECT_EQ(of_kind(event_kind::gave_up).size(), 1u);
  EXPECT_EQ(of_kind(event_kind::stopped).size(), 1u);
  EXPECT_FALSE(names_.get("a")) << "the surviving sibling is stopped before escalating";
  EXPECT_FALSE(names_.get("b"));
  auto e = to_troupe_error(*down->reason, text);
  EXPECT_EQ(e, supervision_errc::intensity_exceeded);
}

TEST_F(intensity_test, failures_spread_wider_than_the_window_are_tolerated) {
  auto c = config();
  c.max_restarts = 2;
  c.window = 1s;
  auto sup = start(c, {test_spec("a")});
  auto down = watch(sup);
  for (int i = 0; i < 6; ++i) {
    tell("a", crash_atom::value);
    advance(600ms);
  }
  EXPECT_FALSE(down->reason) << "never more than 2 restarts within any 1 s";
  EXPECT_EQ(of_kind(event_kind::child_started).size(), 7u);
  tell("a", crash_atom::value);
  EXPECT_FALSE(down->reason) << "2 within the window: at 3.0 s and at 3.6 s";
  tell("a", crash_atom::value);
  EXPECT_TRUE(down->reason) << "a third one within 1 s";
}

TEST_F(intensity_test, zero_max_restarts_gives_up_at_the_first_failure) {
  auto c = config();
  c.max_restarts = 0;
  auto sup = start(c, {test_spec("a")});
  auto down = watch(sup);
  tell("a", crash_atom::value);
  ASSERT_TRUE(down->reason);
  EXPECT_EQ(supervision_code(*down->reason), supervision_errc::intensity_exceeded);
}

TEST_F(intensity_test, child_supervisor_that_gives_up_escalates_to_its_parent_which_restarts_it) {
  auto sub_cfg = config(strategy::one_for_one, "sub");
  sub_cfg.max_restarts = 1;
  auto parent =
      start(config(strategy::one_for_one, "top"), {supervisor_child("sub", sub_cfg, {test_spec("w")})});
  auto down = watch(parent);
  auto sub = names_.get("sub");
  ASSERT_TRUE(sub);
  tell("w", crash_atom::value);
  tell("w", crash_atom::value);  // sub gives up here
  std::vector<supervisor_event> top_exits;
  for (auto& e : of_kind(event_kind::child_exited))
    if (e.supervisor == "top") top_exits.push_back(e);
  ASSERT_EQ(top_exits.size(), 1u);
  EXPECT_EQ(top_exits[0].child, "sub");
  EXPECT_NE(top_exits[0].reason.find("restart intensity exceeded"), std::string::npos) << top_exits[0].reason;
  EXPECT_FALSE(down->reason) << "the parent absorbs the failure";
  ASSERT_TRUE(names_.get("sub"));
  EXPECT_NE(names_.get("sub"), sub);
  EXPECT_TRUE(names_.get("w")) << "the restarted subtree starts its children again";
}

TEST_F(intensity_test, initial_start_failure_stops_started_children_and_exits_with_start_failed) {
  auto bad = test_spec("bad");
  bad.start = [](spawn_context&) -> caf::actor { throw std::runtime_error("cannot open dataset"); };
  auto sup = spawn_supervisor(sys_, names_, config(), {test_spec("a"), bad, test_spec("c")});
  sups_.push_back(sup);
  auto down = watch(sup);
  run();
  ASSERT_TRUE(down->reason);
  EXPECT_EQ(supervision_code(*down->reason), supervision_errc::start_failed);
  EXPECT_NE(sys_.render(*down->reason).find("cannot open dataset"), std::string::npos);
  EXPECT_FALSE(names_.get("a"));
  EXPECT_EQ(names_.generation("c"), 0u) << "children after the failed one are never started";
}

TEST_F(intensity_test, invalid_config_is_refused_at_start) {
  auto c = config();
  c.backoff.jitter = 1.5;
  auto sup = spawn_supervisor(sys_, names_, c, {test_spec("a")});
  sups_.push_back(sup);
  auto down = watch(sup);
  run();
  ASSERT_TRUE(down->reason);
  EXPECT_EQ(supervision_code(*down->reason), supervision_errc::invalid_spec);
  EXPECT_EQ(names_.generation("a"), 0u);
}

TEST_F(intensity_test, node_root_calls_the_escalation_hook_instead_of_exiting) {
  auto c = config(strategy::one_for_one, "root");
  c.max_restarts = 1;
  // Shared: the hook may also run at teardown, after this scope.
  auto seen = std::make_shared<std::vector<std::string>>();
  auto& escalations = *seen;
  auto root = run_node_root(sys_, names_, c, {test_spec("master")},
                            [seen](const std::string& why) { seen->push_back(why); });
  sups_.push_back(root.supervisor());
  run();
  EXPECT_FALSE(root.terminated());
  tell("master", crash_atom::value);
  tell("master", crash_atom::value);
  ASSERT_EQ(escalations.size(), 1u);
  EXPECT_NE(escalations[0].find("restart intensity exceeded"), std::string::npos) << escalations[0];
  EXPECT_NE(escalations[0].find("child 'master'"), std::string::npos) << escalations[0];
  ASSERT_TRUE(root.terminated());
  EXPECT_EQ(*root.exit_reason(), escalations[0]);
}

TEST_F(intensity_test, node_root_shutdown_is_not_an_escalation) {
  auto escalated_flag = std::make_shared<bool>(false);
  auto& escalated = *escalated_flag;
  auto root = run_node_root(sys_, names_, config(), {test_spec("a"), test_spec("b")},
                            [escalated_flag](const std::string&) { *escalated_flag = true; });
  sups_.push_back(root.supervisor());
  run();
  EXPECT_FALSE(root.shutdown(0ms)) << "nothing ran yet on the test coordinator";
  run();
  EXPECT_TRUE(root.terminated());
  EXPECT_EQ(*root.exit_reason(), "");
  EXPECT_FALSE(escalated);
  EXPECT_FALSE(names_.get("a"));
}

}  // namespace
}  // namespace troupe::supervision::test
