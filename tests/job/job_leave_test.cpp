// Nodes that get SIGTERM (Slurm's preemption, scancel, a scale-down) leave cleanly: a worker tells
// the master itself, so its leases go back to TODO and its ring is rebuilt from its own word rather
// than a death notice; a PS shard checkpoints before it exits. Real `troupe run` jobs, real signals.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "job_harness.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s["tasks"]["done"].get<std::uint64_t>();
}

// Waits until `after_tasks` are done, sends `sig` to `node`; false if it never got there.
bool signal_when_running(job_run& r, const std::string& node, std::uint64_t after_tasks, int sig) {
  auto s = wait_status(
      r, [&](const nlohmann::json& j) { return done_tasks(j) >= after_tasks; }, std::chrono::seconds(120));
  if (!s) return false;
  pid_t pid = node_pid(r, node);
  return pid > 0 && ::kill(pid, sig) == 0;
}

void expect_journal_complete(const job_run& r) {
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  ASSERT_TRUE(j);
  auto c = j->counts();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->done, c->total());
}

TEST(job_leave, a_worker_on_sigterm_leaves_before_its_death_is_noticed) {
  mlp_options o;
  o.workers = 3;
  auto r = start_job("worker-term", mlp_job(o));
  ASSERT_TRUE(signal_when_running(r, "worker-1", 3, SIGTERM));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto master = read_file(r.job_dir + "/logs/master.log");
  // The master removed it on its own word: the runner's exit report and the closed connection
  // came later and found it gone.
  EXPECT_NE(master.find("worker-1#0 down: left on SIGTERM"), std::string::npos) << master;
  EXPECT_EQ(master.find(": worker-1#0 down: exited"), std::string::npos) << master;
  EXPECT_EQ(master.find(": worker-1#0 down: connection"), std::string::npos) << master;
  const auto w1 = read_file(r.job_dir + "/logs/worker-1.log");
  EXPECT_NE(w1.find("left the job"), std::string::npos) << w1;
  // Its ring collective in flight failed at once (node_view::leave): the supervisor did not have to
  // give up on the worker actor (3 s), which had made the job end before the worker was replaced.
  EXPECT_EQ(w1.find("did not stop within"), std::string::npos) << w1;
  // A worker the job still wants is replaced (the next incarnation), like any that exits.
  EXPECT_GE(result(r).value("node_restarts", 0), 1);
  expect_journal_complete(r);
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_leave, a_ps_shard_on_sigterm_checkpoints_and_its_successor_resumes_there) {
  auto r = start_job("ps-term", ctr_job(2, 300000, 4, 60000));  // periodic checkpoints: once a minute
  ASSERT_TRUE(signal_when_running(r, "ps-0", 5, SIGTERM));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto ps = read_file(r.job_dir + "/logs/ps-0.log");
  auto stop = ps.find("(checkpointed)");
  ASSERT_NE(stop, std::string::npos) << ps;
  EXPECT_NE(ps.find("restored checkpoint", stop), std::string::npos) << ps;
  auto res = result(r);
  EXPECT_GT(res.value("test_auc", 0.0), res.value("true_auc", 1.0) - 0.05) << res.dump();
  expect_journal_complete(r);
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
