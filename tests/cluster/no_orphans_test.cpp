// The no-orphan guarantee across two generations: a process that uses the local launcher dies
// abruptly, and the nodes it started must die with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

#include "test_util.hpp"
#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster {
namespace {

using namespace std::chrono_literals;
using testing::pid_alive;
using testing::read_file;
using testing::temp_dir;
using testing::wait_until;

// Starts the helper (which launches 3 sleeping grandchildren) and returns the pids from its pid
// file: the helper's own first, then the grandchildren's.
std::vector<int> start_intermediate(local_launcher& l, const temp_dir& dir, bool exit_at_once,
                                    node_handle& handle) {
  node_spec spec;
  spec.id = {"intermediate", 0};
  spec.program = TROUPE_CLUSTER_TEST_HELPER;
  spec.argv = {"cluster_test_helper", "spawn", "3", dir / "pids"};
  if (exit_at_once) spec.argv.push_back("exit");
  spec.log_file = dir / "intermediate.log";
  auto h = l.launch(spec);
  EXPECT_TRUE(h) << h.err().to_string();
  if (!h) return {};
  handle = *h;
  EXPECT_TRUE(wait_until([&] { return std::filesystem::exists(dir / "pids"); }, 20s))
      << read_file(dir / "intermediate.log");
  std::istringstream in(read_file(dir / "pids"));
  std::vector<int> pids;
  for (int pid; in >> pid;) pids.push_back(pid);
  EXPECT_EQ(pids.size(), 4u) << read_file(dir / "intermediate.log");
  return pids;
}

void expect_all_dead_soon(const std::vector<int>& pids) {
  for (std::size_t i = 1; i < pids.size(); ++i)
    EXPECT_TRUE(wait_until([&] { return !pid_alive(pids[i]); }, 5s))
        << "grandchild " << pids[i] << " is still alive (state " << testing::proc_state(pids[i]) << ")";
}

TEST(no_orphans, sigkill_of_the_launching_process_kills_its_nodes) {
  temp_dir dir;
  auto l = local_launcher::create({nullptr, resources{8, 1ull << 30, 0}});
  ASSERT_TRUE(l);
  node_handle h;
  auto pids = start_intermediate(**l, dir, false, h);
  ASSERT_EQ(pids.size(), 4u);
  EXPECT_EQ(pids[0], h.pid);
  for (std::size_t i = 1; i < pids.size(); ++i) ASSERT_TRUE(pid_alive(pids[i])) << pids[i];
  // Kill only the intermediate process itself, not its group: the grandchildren are in groups
  // of their own, so only PR_SET_PDEATHSIG can reach them.
  ASSERT_EQ(::kill(h.pid, SIGKILL), 0);
  auto st = (*l)->wait(h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
  expect_all_dead_soon(pids);
}

TEST(no_orphans, an_exit_without_cleanup_kills_the_nodes) {
  temp_dir dir;
  auto l = local_launcher::create({nullptr, resources{8, 1ull << 30, 0}});
  ASSERT_TRUE(l);
  node_handle h;
  auto pids = start_intermediate(**l, dir, true, h);
  ASSERT_EQ(pids.size(), 4u);
  auto st = (*l)->wait(h, 10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->success()) << st->to_string();
  expect_all_dead_soon(pids);
}

}  // namespace
}  // namespace troupe::cluster
