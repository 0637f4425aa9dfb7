#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "test_util.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"

#include "launcher_fixtures.hpp"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using testing::exit_log;
using testing::make;
using testing::pid_alive;
using testing::read_file;
using testing::shell;
using testing::sleeper;
using testing::temp_dir;
using testing::wait_until;

TEST(local_launcher, bad_programs_fail_at_launch) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  auto spec = sleeper("worker-1");
  spec.program = "/nonexistent/troupe";
  auto r = l->launch(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::launch_failed);
  EXPECT_NE(r.err().to_string().find("/nonexistent/troupe"), std::string::npos) << r.err().to_string();

  spec.program = "no-such-program-troupe";
  r = l->launch(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("not found in PATH"), std::string::npos) << r.err().to_string();

  spec = sleeper("worker-1");
  spec.log_file = dir / "missing-dir/worker-1.log";
  r = l->launch(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("missing-dir/worker-1.log"), std::string::npos) << r.err().to_string();

  spec = sleeper("worker-1");
  spec.working_dir = dir / "missing-dir";
  r = l->launch(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("chdir"), std::string::npos) << r.err().to_string();
  EXPECT_TRUE(l->running().empty());
  EXPECT_EQ(log.size(), 0u);  // failed launches get no exit report
}

TEST(local_launcher, invalid_specs_are_refused) {
  exit_log log;
  auto l = make(log);
  auto spec = sleeper("worker-1");
  spec.argv.clear();
  auto r = l->launch(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::invalid_spec);
  r = l->launch(sleeper("Bad Name"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::invalid_spec);
  ASSERT_TRUE(l->launch(sleeper("worker-1")));
  r = l->launch(sleeper("worker-1"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::already_exists);
}

TEST(local_launcher, refuses_to_scale_past_capacity) {
  exit_log log;
  auto l = make(log, resources{2, 1ull << 30, 0});
  auto spec = [](std::string name) {
    auto s = sleeper(std::move(name));
    s.need = resources{1, 256ull << 20, 0};
    return s;
  };
  auto a = l->launch(spec("worker-1"));
  auto b = l->launch(spec("worker-2"));
  ASSERT_TRUE(a && b);
  auto c = l->launch(spec("worker-3"));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.err(), cluster_errc::insufficient_resources);
  EXPECT_NE(c.err().to_string().find("worker-3#0 needs 1 cpus"), std::string::npos) << c.err().to_string();
  auto gpu = sleeper("worker-9");
  gpu.need.gpus = 1;
  EXPECT_FALSE(l->launch(gpu));
  ASSERT_TRUE(l->signal(*a, SIGKILL));
  ASSERT_TRUE(l->wait(*a, 10s));
  EXPECT_EQ(l->reserved(), (resources{1, 256ull << 20, 0}));
  EXPECT_TRUE(l->launch(spec("worker-3")));
}

TEST(local_launcher, environment_working_dir_and_descriptors) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC on purpose
  ASSERT_GE(leaked, 0);
  auto spec = shell("worker-1",
                    "echo \"foo=$FOO pwd=$(pwd) home=${HOME:-unset}\"; "
                    "test -e /proc/self/fd/" +
                        std::to_string(leaked) +
                        " && echo fd-leaked || echo fd-closed; "
                        "read line || echo stdin-empty",
                    dir / "w.log");
  spec.env = {{"FOO", "bar"}};
  spec.inherit_env = false;
  spec.working_dir = dir.str();
  auto h = l->launch(spec);
  ::close(leaked);
  ASSERT_TRUE(h);
  ASSERT_TRUE(l->wait(*h, 10s));
  auto text = read_file(dir / "w.log");
  EXPECT_NE(text.find("foo=bar pwd=" + dir.str() + " home=unset"), std::string::npos) << text;
  EXPECT_NE(text.find("fd-closed"), std::string::npos) << text;
  EXPECT_NE(text.find("stdin-empty"), std::string::npos) << text;
}

TEST(local_launcher, empty_program_runs_this_binary) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  node_spec spec;
  spec.id = {"master", 0};
  spec.argv = {"cluster_test", "--gtest_list_tests", "--gtest_filter=local_launcher.empty_program*"};
  spec.log_file = dir / "master.log";
  auto h = l->launch(spec);
  ASSERT_TRUE(h) << h.err().to_string();
  auto st = l->wait(*h, 30s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->success()) << st->to_string();
  EXPECT_NE(read_file(dir / "master.log").find("empty_program_runs_this_binary"), std::string::npos);
}

TEST(local_launcher, the_exit_callback_may_launch_a_replacement) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<node_handle> replacement;
  std::unique_ptr<local_launcher> l;
  auto cb = [&](const node_handle& h, const exit_status&) {
    if (h.id.incarnation != 0) return;
    auto spec = sleeper(h.id.name);
    spec.id.incarnation = h.id.incarnation + 1;
    auto r = l->launch(spec);
    std::lock_guard lock(mu);
    if (r) replacement = *r;
    cv.notify_all();
  };
  auto created = local_launcher::create({cb, resources{8, 1ull << 30, 0}});
  ASSERT_TRUE(created);
  l = std::move(*created);
  auto h = l->launch(sleeper("ps-1"));
  ASSERT_TRUE(h);
  ASSERT_TRUE(l->signal(*h, SIGKILL));
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return replacement.has_value(); }));
  EXPECT_EQ(replacement->id, (node_id{"ps-1", 1}));
  EXPECT_TRUE(pid_alive(replacement->pid));
  lock.unlock();
  l.reset();
  EXPECT_FALSE(pid_alive(replacement->pid));
}

TEST(local_launcher, wait_times_out_on_a_running_node) {
  exit_log log;
  auto l = make(log);
  auto h = l->launch(sleeper("worker-1"));
  ASSERT_TRUE(h);
  auto r = l->wait(*h, 50ms);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::timed_out);
  node_handle unknown;
  unknown.serial = 999;
  unknown.id = {"worker-9", 0};
  unknown.pid = 1;
  EXPECT_EQ(l->poll(unknown).err(), cluster_errc::no_such_node);
}

// With SIGCHLD ignored the kernel reaps children itself; the launcher must neither hang nor
// signal a pid it no longer owns, and reports the status as unknown (code -1). Runs in a death-test
// child: 0 on success, else the failing step.
int launch_with_sigchld_ignored() {
  ::signal(SIGCHLD, SIG_IGN);
  auto l = local_launcher::create({nullptr, resources{1, 1ull << 30, 0}});
  if (!l) return 2;
  node_spec s;
  s.id = {"worker-1", 0};
  s.program = "/bin/sh";
  s.argv = {"sh", "-c", "exit 3"};
  auto h = (*l)->launch(s);
  if (!h) return 3;
  auto st = (*l)->wait(*h, std::chrono::seconds(10));
  return st && st->code == -1 && !st->signaled() ? 0 : 4;
}

TEST(local_launcher, children_reaped_by_the_kernel_are_reported_unknown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(launch_with_sigchld_ignored()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace troupe::cluster
