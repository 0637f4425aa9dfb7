#include "troupe/collective/shm/liveness.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace troupe::collective {
namespace {

std::string unique_name(const char* what) {
  return liveness_beacon::name_for("livetest" + std::to_string(::getpid()), what);
}

// Forks a child that starts a beacon, reports readiness on a pipe, then either waits to be killed
// or (clean) drops the beacon and exits 0.
pid_t start_child(const std::string& name, bool clean) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto b = liveness_beacon::start(name);
    char ok = b ? 1 : 0;
    if (::write(fds[1], &ok, 1) != 1) std::_Exit(2);
    if (!b) std::_Exit(1);
    if (clean) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      b->reset();
      std::_Exit(0);
    }
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char ok = 0;
  bool ready = ::read(fds[0], &ok, 1) == 1 && ok == 1;
  ::close(fds[0]);
  return ready ? pid : -1;
}

bool wait_gone(liveness_watch& w, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (w.gone()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

TEST(liveness, a_live_holder_is_not_gone_and_a_killed_one_is) {
  auto name = unique_name("killed");
  pid_t pid = start_child(name, false);
  ASSERT_GT(pid, 0);
  auto w = liveness_watch::open(name);
  ASSERT_TRUE(w) << "no beacon /" << name;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(w->gone());
  // A second watcher sees the same.
  auto w2 = liveness_watch::open(name);
  ASSERT_TRUE(w2);
  EXPECT_FALSE(w2->gone());
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(wait_gone(*w, std::chrono::seconds(10)));
  EXPECT_TRUE(w->gone()) << "gone stays gone";
  EXPECT_TRUE(wait_gone(*w2, std::chrono::seconds(1)))
      << "the first watcher released the dead holder's mutex";
  ::waitpid(pid, nullptr, 0);
  EXPECT_TRUE(liveness_beacon::released(name)) << "anyone can check a killed holder's beacon";
  liveness_beacon::remove(name);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
  EXPECT_FALSE(liveness_beacon::released(name)) << "no beacon: nothing to vouch for";
}

TEST(liveness, a_clean_exit_is_gone_and_removes_the_beacon) {
  auto name = unique_name("clean");
  pid_t pid = start_child(name, true);
  ASSERT_GT(pid, 0);
  auto w = liveness_watch::open(name);
  ASSERT_TRUE(w);
  EXPECT_TRUE(wait_gone(*w, std::chrono::seconds(10)));
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

TEST(liveness, no_beacon_is_no_watch) {
  EXPECT_EQ(liveness_watch::open(unique_name("absent")), nullptr);
}

TEST(liveness, names_are_valid_shm_names) {
  auto n = liveness_beacon::name_for("job-1", "worker-3#2");
  EXPECT_EQ(n.find('/'), std::string::npos);
  EXPECT_EQ(n.find('#'), std::string::npos);
  EXPECT_EQ(n, "troupe-job-1-live-worker-3_2");
}

}  // namespace
}  // namespace troupe::collective
