// The supervisor on CAF's real, threaded scheduler.
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "troupe/supervision/caf_errors.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/supervision/node_root.hpp"
#include "troupe/supervision/protocol.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision {
namespace {

using namespace std::chrono_literals;
using boom_atom = caf::atom_constant<caf::atom("r_boom")>;
using who_atom = caf::atom_constant<caf::atom("r_who")>;

caf::behavior worker(caf::event_based_actor* self, std::uint32_t incarnation) {
  return {
      [](boom_atom) -> std::uint32_t { throw std::runtime_error("worker lost its GPU"); },
      [incarnation](who_atom) { return incarnation; },
  };
}

child_spec worker_spec(std::string name) {
  child_spec s;
  s.name = std::move(name);
  s.start = [](spawn_context& ctx) { return ctx.system.spawn(worker, ctx.restarts); };
  return s;
}

class real_scheduler_test : public ::testing::Test {
 protected:
  static caf::actor_system_config& init(caf::actor_system_config& c) {
    c.set("scheduler.max-threads", 2);
    add_supervision_error_category(c);
    return c;
  }
  // A failed assertion may leave a supervisor running; ~actor_system would wait for it for ever.
  ~real_scheduler_test() override {
    for (auto& s : leftovers_) caf::anon_send_exit(s, caf::exit_reason::kill);
  }
  supervisor_config config() {
    supervisor_config c;
    c.name = "node";
    c.backoff.base = 10ms;
    c.backoff.max = 100ms;
    return c;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_{init(cfg_)};
  name_registry names_;
  std::vector<caf::actor> leftovers_;
};

TEST_F(real_scheduler_test, a_child_that_throws_is_restarted_and_reachable_by_name_again) {
  auto root = run_node_root(sys_, names_, config(), {worker_spec("worker/7")},
                            [](const std::string& why) { ADD_FAILURE() << "escalated: " << why; });
  leftovers_.push_back(root.supervisor());
  caf::scoped_actor self{sys_};
  // Children start when the supervisor first runs (on a scheduler thread); an answered request
  // proves it did.
  self->request(root.supervisor(), 10s, count_children_atom::value)
      .receive([](child_counts& n) { EXPECT_EQ(n.active, 1u); },
               [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  auto first = names_.get("worker/7");
  ASSERT_TRUE(first);
  std::uint32_t inc = 99;
  self->request(first, 10s, who_atom::value)
      .receive([&](std::uint32_t i) { inc = i; }, [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  EXPECT_EQ(inc, 0u);

  std::mutex mu;
  std::condition_variable cv;
  caf::actor replacement;
  auto sub = names_.subscribe("worker/7", [&](const std::string&, const caf::actor& a) {
    std::lock_guard<std::mutex> g(mu);
    if (a) replacement = a;
    cv.notify_all();
  });
  self->send(first, boom_atom::value);
  {
    std::unique_lock<std::mutex> g(mu);
    ASSERT_TRUE(cv.wait_for(g, 10s, [&] { return static_cast<bool>(replacement); }));
  }
  EXPECT_NE(replacement, first);
  auto by_name = names_.get("worker/7");
  ASSERT_TRUE(by_name);
  self->request(by_name, 10s, who_atom::value)
      .receive([&](std::uint32_t i) { inc = i; }, [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  EXPECT_EQ(inc, 1u) << "the name resolves to the restarted incarnation";

  EXPECT_TRUE(root.shutdown(10s));
  EXPECT_EQ(*root.exit_reason(), "");
  EXPECT_FALSE(names_.get("worker/7"));
}

TEST_F(real_scheduler_test, status_queries_and_dynamic_children_over_requests) {
  auto sup = spawn_supervisor(sys_, names_, config(), {worker_spec("master")});
  leftovers_.push_back(sup);
  caf::scoped_actor self{sys_};
  self->request(sup, 10s, start_child_atom::value, worker_spec("worker/1"))
      .receive([&](caf::actor& a) { EXPECT_EQ(names_.get("worker/1"), a); },
               [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  self->request(sup, 10s, count_children_atom::value)
      .receive([&](child_counts& n) { EXPECT_EQ(n.active, 2u); },
               [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  self->request(sup, 10s, terminate_child_atom::value, std::string("worker/1"))
      .receive([] {}, [&](caf::error& e) { ADD_FAILURE() << sys_.render(e); });
  EXPECT_FALSE(names_.get("worker/1"));
  self->monitor(sup);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  self->receive([&](caf::down_msg& m) { EXPECT_EQ(m.reason, caf::error(caf::exit_reason::user_shutdown)); });
}

// The real escalation: in a child process, a root whose only child keeps crashing gives up and
// the default hook ends the process with code 1 and the reason on the log (stderr here).
void run_doomed_node() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("doomed"));
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  add_supervision_error_category(cfg);
  caf::actor_system sys{cfg};
  name_registry names;
  supervisor_config c;
  c.name = "root";
  c.max_restarts = 0;
  auto root = run_node_root(sys, names, c, {worker_spec("master")});
  caf::anon_send(root.supervisor(), start_child_atom::value, worker_spec("doomed"));
  for (int i = 0; i < 1000 && !names.get("doomed"); ++i) std::this_thread::sleep_for(10ms);
  caf::anon_send(names.get("doomed"), boom_atom::value);
  std::this_thread::sleep_for(30s);  // the hook exits long before
  std::_Exit(0);
}

TEST(node_root_escalation, default_hook_exits_the_process_with_a_logged_reason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_doomed_node(), ::testing::ExitedWithCode(1),
              "root supervisor gave up: supervise: restart intensity exceeded: supervisor 'root': "
              "child 'doomed'");
}

}  // namespace
}  // namespace troupe::supervision
