#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
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

TEST(local_launcher, reports_exit_code_and_writes_the_log) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  auto h = l->launch(shell("worker-1", "echo hello; echo oops >&2; exit 3", dir / "worker-1.log"));
  ASSERT_TRUE(h) << h.err().to_string();
  EXPECT_GT(h->pid, 0);
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code, 3);
  EXPECT_FALSE(st->signaled());
  EXPECT_EQ(st->to_string(), "exited with code 3");
  auto text = read_file(dir / "worker-1.log");
  EXPECT_NE(text.find("start worker-1#0: /bin/sh -c"), std::string::npos) << text;
  EXPECT_NE(text.find("hello\n"), std::string::npos) << text;
  EXPECT_NE(text.find("oops\n"), std::string::npos) << text;
  EXPECT_NE(text.find("worker-1#0 pid " + std::to_string(h->pid) + " exited with code 3"), std::string::npos)
      << text;
  auto polled = l->poll(*h);
  ASSERT_TRUE(polled);
  ASSERT_TRUE(polled->has_value());
  EXPECT_EQ(**polled, *st);
}

TEST(local_launcher, sigkill_is_reported_with_the_signal) {
  exit_log log;
  auto l = make(log);
  auto h = l->launch(sleeper("worker-2"));
  ASSERT_TRUE(h) << h.err().to_string();
  EXPECT_TRUE(pid_alive(h->pid));
  auto polled = l->poll(*h);
  ASSERT_TRUE(polled);
  EXPECT_FALSE(polled->has_value());
  ASSERT_EQ(::kill(h->pid, SIGKILL), 0);
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
  EXPECT_EQ(st->to_string(), "killed by SIGKILL");
  EXPECT_FALSE(pid_alive(h->pid));
  auto again = l->signal(*h, SIGTERM);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err(), cluster_errc::no_such_node);
  EXPECT_TRUE(l->running().empty());
}

TEST(local_launcher, signal_reaches_the_process_group) {
  exit_log log;
  auto l = make(log);
  auto h = l->launch(sleeper("worker-1"));
  ASSERT_TRUE(h);
  ASSERT_TRUE(l->signal(*h, SIGTERM));
  auto st = l->wait(*h, 10s);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_EQ(st->signal, SIGTERM);
}

TEST(local_launcher, log_is_appended_across_incarnations) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  for (std::uint64_t inc = 0; inc < 2; ++inc) {
    auto spec = shell("ps-0", "echo run-" + std::to_string(inc), dir / "ps-0.log");
    spec.id.incarnation = inc;
    auto h = l->launch(spec);
    ASSERT_TRUE(h);
    ASSERT_TRUE(l->wait(*h, 10s));
  }
  auto text = read_file(dir / "ps-0.log");
  auto first = text.find("start ps-0#0");
  auto second = text.find("start ps-0#1");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_LT(first, text.find("run-0"));
  EXPECT_LT(text.find("run-0"), second);
  EXPECT_LT(second, text.find("run-1"));
}

TEST(local_launcher, destruction_leaves_no_child_alive) {
  exit_log log;
  std::vector<int> pids;
  {
    auto l = make(log);
    for (int i = 0; i < 3; ++i) {
      auto h = l->launch(sleeper("worker-" + std::to_string(i)));
      ASSERT_TRUE(h);
      pids.push_back(h->pid);
    }
    for (int pid : pids) EXPECT_TRUE(pid_alive(pid));
  }
  for (int pid : pids) EXPECT_FALSE(pid_alive(pid)) << pid;
  EXPECT_EQ(log.size(), 3u);  // every node got its report, during destruction
}

TEST(local_launcher, a_stopped_node_is_not_reported_and_still_killed) {
  exit_log log;
  int pid = 0;
  node_handle stopped;
  {
    auto l = make(log);
    auto h = l->launch(sleeper("worker-1"));
    ASSERT_TRUE(h);
    stopped = *h;
    pid = h->pid;
    ASSERT_TRUE(l->signal(*h, SIGSTOP));
    ASSERT_TRUE(wait_until([&] { return testing::proc_state(pid) == 'T'; }, 5s));
    // Two reaper passes that look at the stopped node: each reports a node that exits at once,
    // and the second starts only after the first has sent all its reports.
    for (const char* name : {"worker-2", "worker-3"}) {
      auto quick = l->launch(shell(name, "exit 0"));
      ASSERT_TRUE(quick) << quick.err().to_string();
      ASSERT_TRUE(log.wait_for(*quick, 10s)) << name;
    }
    EXPECT_EQ(log.size(), 2u);  // the quick ones only: stopped is not exited
    EXPECT_EQ(l->running().size(), 1u);
  }
  EXPECT_FALSE(pid_alive(pid));
  ASSERT_EQ(log.size(), 3u);
  auto st = log.wait_for(stopped, 0ms);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
}

// What the runner does to a node the master declared dead: a SIGSTOPped node (and what it
// started in its group) dies at once, with no SIGCONT, and is reported as killed.
TEST(local_launcher, fence_kills_a_stopped_node_with_its_group) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  auto h =
      l->launch(shell("worker-1", "sleep 1000 & echo $! > " + (dir / "bg.pid") + "; wait", dir / "w.log"));
  ASSERT_TRUE(h);
  ASSERT_TRUE(wait_until([&] { return std::atoi(read_file(dir / "bg.pid").c_str()) > 0; }, 5s));
  int bg = std::atoi(read_file(dir / "bg.pid").c_str());
  ASSERT_TRUE(l->signal(*h, SIGSTOP));  // the whole group is stopped
  ASSERT_TRUE(
      wait_until([&] { return testing::proc_state(h->pid) == 'T' && testing::proc_state(bg) == 'T'; }, 5s));
  ASSERT_TRUE(l->fence(*h));
  auto st = log.wait_for(*h, 5s);
  ASSERT_TRUE(st) << "a fenced stopped node was not reported within 5 s";
  EXPECT_EQ(st->signal, SIGKILL);
  EXPECT_FALSE(pid_alive(h->pid));
  EXPECT_TRUE(wait_until([&] { return !pid_alive(bg); }, 5s)) << "pid " << bg << " of the group survived";
  auto again = l->fence(*h);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err(), cluster_errc::no_such_node);
}

TEST(local_launcher, destruction_ends_even_if_the_callback_always_relaunches) {
  std::atomic<int> refused{0};
  local_launcher* raw = nullptr;  // unique_ptr::reset() nulls the pointer before deleting
  auto cb = [&](const node_handle& h, const exit_status&) {
    auto spec = sleeper(h.id.name);
    spec.id.incarnation = h.id.incarnation + 1;
    if (!raw->launch(spec)) ++refused;
  };
  auto created = local_launcher::create({cb, resources{8, 1ull << 30, 0}});
  ASSERT_TRUE(created);
  auto l = std::move(*created);
  raw = l.get();
  ASSERT_TRUE(l->launch(sleeper("worker-1")));
  ASSERT_TRUE(l->launch(sleeper("worker-2")));
  l.reset();  // must return: replacements are refused while stopping
  EXPECT_EQ(refused.load(), 2);
}

TEST(local_launcher, kill_all_reaps_and_reports_before_returning) {
  exit_log log;
  auto l = make(log);
  std::vector<node_handle> hs;
  for (int i = 0; i < 3; ++i) {
    auto h = l->launch(sleeper("worker-" + std::to_string(i)));
    ASSERT_TRUE(h);
    hs.push_back(*h);
  }
  EXPECT_EQ(l->running().size(), 3u);
  l->kill_all();
  EXPECT_EQ(log.size(), 3u);
  EXPECT_TRUE(l->running().empty());
  for (const auto& h : hs) {
    EXPECT_FALSE(pid_alive(h.pid));
    auto st = l->poll(h);
    ASSERT_TRUE(st && st->has_value());
    EXPECT_EQ((*st)->signal, SIGKILL);
  }
  l->kill_all();  // idempotent
}

TEST(local_launcher, leftovers_in_a_nodes_group_die_with_it) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  // The shell starts a background sleep in its own group and exits at once.
  // (A log file, so that a surviving sleep cannot hold this test's stdout open.)
  auto h =
      l->launch(shell("worker-1", "sleep 1000 & echo $! > " + (dir / "bg.pid") + "; exit 0", dir / "w.log"));
  ASSERT_TRUE(h);
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  int bg = std::atoi(read_file(dir / "bg.pid").c_str());
  ASSERT_GT(bg, 0);
  EXPECT_TRUE(wait_until([&] { return !pid_alive(bg); }, 5s)) << "background pid " << bg << " survived";
}

TEST(local_launcher, children_outlive_the_thread_that_launched_them) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  const auto go = dir / "go", ack = dir / "ack";
  // The node answers only once told to (after `t` is gone), then keeps running.
  auto spec = shell("worker-1", "while [ ! -e " + go + " ]; do sleep 0.01; done; echo alive > " + ack +
                                    "; exec sleep 1000");
  expected<node_handle> h = make_unexpected(cluster_errc::ok, "");
  pid_t tid = 0;
  std::thread t([&] {
    tid = ::gettid();
    h = l->launch(spec);
  });
  t.join();
  ASSERT_TRUE(h) << h.err().to_string();
  // PR_SET_PDEATHSIG tied to `t` would be sent while `t` exits, before its task entry is gone; a
  // SIGKILLed node never runs another line of its script.
  const auto task = "/proc/self/task/" + std::to_string(tid);
  ASSERT_TRUE(wait_until([&] { return !std::filesystem::exists(task); }, 5s)) << task;
  std::ofstream(go) << "go\n";
  EXPECT_TRUE(wait_until([&] { return std::filesystem::exists(ack); }, 10s))
      << "the node died with the thread";
  EXPECT_TRUE(pid_alive(h->pid));
  EXPECT_EQ(log.size(), 0u);
}

}  // namespace
}  // namespace troupe::cluster
