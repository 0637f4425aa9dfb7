// supervision_errc as troupe::error and caf::error; supervisor_config from TOML; child specs.
#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>

#include "troupe/supervision/caf_errors.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace troupe::supervision {
namespace {

using namespace std::chrono_literals;

TEST(supervision_errors, std_error_code_category_and_messages) {
  error e(supervision_errc::unknown_child, "child 'worker/9'");
  EXPECT_EQ(e.to_string(), "supervision: unknown child: child 'worker/9'");
  EXPECT_TRUE(e == supervision_errc::unknown_child);
  EXPECT_EQ(make_error_code(static_cast<supervision_errc>(200)).message(), "unknown supervision error 200");
}

TEST(supervision_errors, caf_errors_render_with_their_context) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  add_supervision_error_category(cfg);
  caf::actor_system sys{cfg};
  auto err = make_caf_error(supervision_errc::intensity_exceeded, "supervisor 'root': child 'ps/3'");
  EXPECT_EQ(sys.render(err), "supervise: restart intensity exceeded: supervisor 'root': child 'ps/3'");
  EXPECT_EQ(sys.render(make_caf_error(supervision_errc::start_failed)), "supervise: child failed to start");
  EXPECT_EQ(supervision_code(err), supervision_errc::intensity_exceeded);
  EXPECT_EQ(supervision_code(caf::make_error(caf::sec::runtime_error)), supervision_errc::ok);
  EXPECT_EQ(supervision_code(caf::error{}), supervision_errc::ok);

  auto mine = to_troupe_error(err, sys.render(err));
  EXPECT_EQ(mine, supervision_errc::intensity_exceeded);
  EXPECT_EQ(mine.context(), "supervisor 'root': child 'ps/3'");
  auto foreign = caf::make_error(caf::sec::runtime_error);
  auto theirs = to_troupe_error(foreign, sys.render(foreign));
  EXPECT_EQ(theirs, supervision_errc::child_failed);
  EXPECT_NE(theirs.context().find("runtime_error"), std::string::npos) << theirs.context();
  EXPECT_FALSE(to_troupe_error(caf::error{}, ""));
}

TEST(supervision_errors, normal_exits) {
  EXPECT_TRUE(is_normal_exit(caf::error{}));
  EXPECT_TRUE(is_normal_exit(caf::exit_reason::normal));
  EXPECT_TRUE(is_normal_exit(caf::exit_reason::user_shutdown));
  EXPECT_FALSE(is_normal_exit(caf::exit_reason::kill));
  EXPECT_FALSE(is_normal_exit(caf::make_error(caf::sec::runtime_error)));
  EXPECT_FALSE(is_normal_exit(make_caf_error(supervision_errc::intensity_exceeded)));
}

supervisor_config read(const std::string& toml, error* problem = nullptr) {
  auto doc = config_doc::from_string(toml, "job.toml");
  EXPECT_TRUE(doc) << doc.err().to_string();
  config_reader r(*doc);
  auto c = supervisor_config::read(r.section("supervision"), supervisor_config{});
  auto done = r.finish();
  if (problem)
    *problem = done ? error{} : done.err();
  else
    EXPECT_TRUE(done) << done.err().to_string();
  return c;
}

TEST(supervisor_config_read, reads_every_key) {
  auto c = read(
      "[supervision]\nstrategy = 'rest_for_one'\nmax_restarts = 3\nwindow_ms = 2000\n"
      "backoff_base_ms = 5\nbackoff_max_ms = 50\nbackoff_jitter = 0.5\nbackoff_reset_ms = 700\nseed = 9\n");
  EXPECT_EQ(c.strat, strategy::rest_for_one);
  EXPECT_EQ(c.max_restarts, 3u);
  EXPECT_EQ(c.window, 2s);
  EXPECT_EQ(c.backoff.base, 5ms);
  EXPECT_EQ(c.backoff.max, 50ms);
  EXPECT_DOUBLE_EQ(c.backoff.jitter, 0.5);
  EXPECT_EQ(c.backoff_reset_after, 700ms);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_TRUE(c.validate());
}

TEST(supervisor_config_read, absent_table_keeps_defaults) {
  auto c = read("# nothing about supervision\n", nullptr);
  EXPECT_EQ(c.strat, strategy::one_for_one);
  EXPECT_EQ(c.max_restarts, supervisor_config{}.max_restarts);
}

TEST(supervisor_config_read, bad_values_name_the_key) {
  error e;
  read("[supervision]\nstrategy = 'one_for_some'\n", &e);
  ASSERT_TRUE(e);
  EXPECT_NE(e.to_string().find("supervision.strategy"), std::string::npos) << e.to_string();
  read("[supervision]\nbackoff_jitter = 2.0\n", &e);
  EXPECT_NE(e.to_string().find("supervision.backoff_jitter"), std::string::npos) << e.to_string();
  read("[supervision]\nbackoff_base_ms = 500\nbackoff_max_ms = 100\n", &e);
  EXPECT_NE(e.to_string().find("supervision.backoff_base_ms"), std::string::npos) << e.to_string();
}

TEST(supervisor_config_validate, rejects_nonsense) {
  supervisor_config c;
  c.backoff.jitter = -0.1;
  EXPECT_FALSE(c.validate());
  c = supervisor_config{};
  c.window = 0ms;
  EXPECT_FALSE(c.validate());
  c = supervisor_config{};
  c.backoff.base = 2s;
  c.backoff.max = 1s;
  auto v = c.validate();
  ASSERT_FALSE(v);
  EXPECT_EQ(v.err(), supervision_errc::invalid_spec);
}

TEST(child_spec_validate, checks_name_factory_and_timeout) {
  child_spec s;
  s.name = "worker/7";
  EXPECT_FALSE(validate(s)) << "no factory";
  s.start = [](spawn_context&) -> caf::actor { return {}; };
  EXPECT_TRUE(validate(s));
  s.name = "7worker";
  EXPECT_FALSE(validate(s));
  s.name = "ps/3";
  s.shutdown = -1ms;
  EXPECT_FALSE(validate(s));
}

}  // namespace
}  // namespace troupe::supervision
