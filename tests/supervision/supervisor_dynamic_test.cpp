// Children added and removed at run time (the master's workers), and status queries.
#include "det_fixture.hpp"

namespace troupe::supervision::test {
namespace {

using dynamic_test = det_fixture;

TEST_F(dynamic_test, start_child_spawns_registers_and_supervises) {
  auto sup = start(config(), {test_spec("master")});
  auto w = ask<caf::actor>(sup, start_child_atom::value, test_spec("worker/1"));
  ASSERT_TRUE(w) << sys_.render(w.error());
  EXPECT_EQ(names_.get("worker/1"), *w);
  auto kids = ask<std::vector<child_info>>(sup, which_children_atom::value);
  ASSERT_TRUE(kids);
  ASSERT_EQ(kids->size(), 2u);
  EXPECT_EQ((*kids)[1].name, "worker/1");
  EXPECT_EQ((*kids)[1].actor, *w);
  EXPECT_EQ((*kids)[1].status, child_status::running);
  tell("worker/1", crash_atom::value);
  EXPECT_TRUE(names_.get("worker/1")) << "a dynamic child is restarted like the others";
  EXPECT_NE(names_.get("worker/1"), *w);
  auto n = ask<child_counts>(sup, count_children_atom::value);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->specs, 2u);
  EXPECT_EQ(n->active, 2u);
  EXPECT_EQ(n->restarting, 0u);
}

TEST_F(dynamic_test, start_child_refuses_a_taken_name_and_a_bad_spec) {
  auto sup = start(config(), {test_spec("master")});
  auto dup = ask<caf::actor>(sup, start_child_atom::value, test_spec("master"));
  ASSERT_FALSE(dup);
  EXPECT_EQ(supervision_code(dup.error()), supervision_errc::duplicate_name);
  auto bad = ask<caf::actor>(sup, start_child_atom::value, test_spec("Bad Name"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(supervision_code(bad.error()), supervision_errc::invalid_spec);
  EXPECT_NE(sys_.render(bad.error()).find("Bad Name"), std::string::npos);
  auto spec = test_spec("worker/2");
  spec.start = nullptr;
  auto none = ask<caf::actor>(sup, start_child_atom::value, spec);
  ASSERT_FALSE(none);
  EXPECT_EQ(supervision_code(none.error()), supervision_errc::invalid_spec);
}

TEST_F(dynamic_test, start_child_whose_factory_fails_reports_start_failed_and_is_not_kept) {
  auto sup = start(config(), {});
  auto spec = test_spec("worker/3");
  spec.start = [](spawn_context&) { return caf::actor{}; };
  auto r = ask<caf::actor>(sup, start_child_atom::value, spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(supervision_code(r.error()), supervision_errc::start_failed);
  auto n = ask<child_counts>(sup, count_children_atom::value);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->specs, 0u);
}

TEST_F(dynamic_test, terminate_child_stops_it_for_good) {
  auto sup = start(config(), {test_spec("master"), test_spec("worker/1")});
  auto w = watch(names_.get("worker/1"));
  auto r = ask_void(sup, terminate_child_atom::value, std::string("worker/1"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r) << sys_.render(*r);
  ASSERT_TRUE(w->reason);
  EXPECT_EQ(*w->reason, caf::error(caf::exit_reason::user_shutdown));
  EXPECT_FALSE(names_.get("worker/1")) << "a permanent child terminated on request stays down";
  EXPECT_TRUE(of_kind(event_kind::restart_scheduled).empty());
  auto kids = ask<std::vector<child_info>>(sup, which_children_atom::value);
  ASSERT_TRUE(kids);
  ASSERT_EQ(kids->size(), 1u);
  EXPECT_EQ((*kids)[0].name, "master");
}

TEST_F(dynamic_test, terminate_child_waits_for_a_stubborn_child_to_be_killed) {
  auto sup = start(config(), {test_spec("w", restart_type::permanent, true, 500ms)});
  auto r = std::make_shared<std::optional<caf::error>>();
  sys_.spawn([=](caf::event_based_actor* self) {
    self->request(sup, caf::infinite, terminate_child_atom::value, std::string("w"))
        .then([=]() { *r = caf::error{}; }, [=](caf::error& e) { *r = e; });
  });
  run();
  EXPECT_FALSE(*r) << "no answer before the child is down";
  advance(500ms);
  ASSERT_TRUE(*r);
  EXPECT_FALSE(**r);
  EXPECT_EQ(of_kind(event_kind::child_killed).size(), 1u);
}

TEST_F(dynamic_test, terminate_unknown_child_is_an_error) {
  auto sup = start(config(), {test_spec("master")});
  auto r = ask_void(sup, terminate_child_atom::value, std::string("worker/9"));
  ASSERT_TRUE(r);
  ASSERT_TRUE(*r);
  EXPECT_EQ(supervision_code(*r), supervision_errc::unknown_child);
}

TEST_F(dynamic_test, start_child_during_shutdown_is_refused) {
  auto sup = start(config(), {test_spec("stubborn", restart_type::permanent, true, 1000ms)});
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();  // waiting for the stubborn child's kill timer
  auto r = ask<caf::actor>(sup, start_child_atom::value, test_spec("late"));
  ASSERT_FALSE(r);
  EXPECT_EQ(supervision_code(r.error()), supervision_errc::shutting_down);
}

}  // namespace
}  // namespace troupe::supervision::test
