#include "troupe/collective/shm/liveness.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "troupe/collective/cleanup.hpp"
#include "troupe/collective/shm/link.hpp"
#include "troupe/transport/shm_ring.hpp"

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

// Polls `ready` until it holds (each poll is cheap); false after `limit`.
template <typename F>
bool eventually(F ready, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

TEST(host_liveness, a_killed_node_is_gone_until_its_leftover_is_removed) {
  std::string job = "livetest" + std::to_string(::getpid()) + "h";
  auto live = make_host_liveness(job);
  node_id node{"worker-3", 2};
  // The child starts the node's beacon through the interface, as a worker's node does.
  pid_t pid = start_child(liveness_beacon::name_for(job, node.to_string()), false);
  ASSERT_GT(pid, 0);
  auto w = live->watch_node(node);
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->gone());
  EXPECT_FALSE(live->gone(node));
  EXPECT_FALSE(live->gone(node_id{"worker-3", 1})) << "another incarnation is another node";
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(eventually([&] { return live->gone(node); }, std::chrono::seconds(10)));
  EXPECT_TRUE(w->gone());
  ::waitpid(pid, nullptr, 0);
  live->remove(node);
  EXPECT_FALSE(live->gone(node)) << "removed: nothing is known any more";
  EXPECT_EQ(live->watch_node(node), nullptr);
}

TEST(host_liveness, a_beacon_started_through_the_interface_is_watched_and_removes_itself) {
  std::string job = "livetest" + std::to_string(::getpid()) + "s";
  auto live = make_host_liveness(job);
  node_id me{"worker-1", 7};
  EXPECT_EQ(live->watch_node(me), nullptr) << "no beacon yet";
  auto b = live->start(me);
  ASSERT_TRUE(b) << b.err().to_string();
  auto w = live->watch_node(me);
  ASSERT_TRUE(w);
  EXPECT_FALSE(w->gone());
  b->reset();  // a clean exit
  EXPECT_TRUE(w->gone());
  EXPECT_FALSE(live->gone(me)) << "a clean exit leaves nothing behind";
}

TEST(host_liveness, remove_job_leftovers_removes_the_jobs_rings_and_beacons_only) {
  std::string job = "lefttest" + std::to_string(::getpid());
  std::string other = job + "0";  // its names share the prefix "troupe-<job>"
  auto ring = transport::shm_ring::create(shm_ring_link::ring_name(job, 3, 1), 4096);
  auto spare = transport::shm_ring::create(shm_ring_link::ring_name(job, 0, 0) + "-spare-1", 4096);
  auto others = transport::shm_ring::create(shm_ring_link::ring_name(other, 3, 1), 4096);
  ASSERT_TRUE(ring && spare && others);
  auto beacon = make_host_liveness(job)->start(node_id{"worker-0", 1});
  auto others_beacon = make_host_liveness(other)->start(node_id{"worker-0", 1});
  ASSERT_TRUE(beacon && others_beacon);
  remove_job_leftovers(job);
  EXPECT_FALSE(shm_ring_link::ring_exists(job, 3, 1));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + shm_ring_link::ring_name(job, 0, 0) + "-spare-1"));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + liveness_beacon::name_for(job, "worker-0#1")));
  EXPECT_TRUE(shm_ring_link::ring_exists(other, 3, 1));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + liveness_beacon::name_for(other, "worker-0#1")));
}

// Two runs of one job id (two directories, or a resumed job and its dead runner's leftovers) are
// two instances: their names differ, and removing one's leaves the other's.
TEST(host_liveness, two_instances_of_one_job_share_no_names) {
  std::string job = "twintest" + std::to_string(::getpid());
  auto a = instance_key(job, "aaaa0001"), b = instance_key(job, "bbbb0002");
  EXPECT_EQ(instance_key(job, ""), job);
  EXPECT_NE(shm_ring_link::ring_name(a, 3, 1), shm_ring_link::ring_name(b, 3, 1));
  auto ring_a = transport::shm_ring::create(shm_ring_link::ring_name(a, 3, 1), 4096);
  auto ring_b = transport::shm_ring::create(shm_ring_link::ring_name(b, 3, 1), 4096);
  ASSERT_TRUE(ring_a && ring_b);
  auto beacon_a = make_host_liveness(a)->start(node_id{"worker-0", 0});
  auto beacon_b = make_host_liveness(b)->start(node_id{"worker-0", 0});
  ASSERT_TRUE(beacon_a && beacon_b);
  remove_job_leftovers(job);  // the bare id names neither instance
  EXPECT_TRUE(shm_ring_link::ring_exists(a, 3, 1));
  remove_job_leftovers(a);
  EXPECT_FALSE(shm_ring_link::ring_exists(a, 3, 1));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + liveness_beacon::name_for(a, "worker-0#0")));
  EXPECT_TRUE(shm_ring_link::ring_exists(b, 3, 1));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + liveness_beacon::name_for(b, "worker-0#0")));
  remove_job_leftovers(b);
}

}  // namespace
}  // namespace troupe::collective
