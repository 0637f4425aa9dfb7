// Jobs that lose nodes to SIGKILL, or are scaled while they run, and still complete: every task
// DONE, metrics close to an undisturbed run, no orphan processes.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "job_harness.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

// Sized to run for several seconds on 2 cores (the status polls and kills need time to land).

storage::task_counts counts(const job_run& r) {
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  EXPECT_TRUE(j);
  return j ? j->counts().value() : storage::task_counts{};
}

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s["tasks"]["done"].get<std::uint64_t>();
}

// Waits until some tasks are done, SIGKILLs `node`, and returns whether it found it.
bool kill_when_running(job_run& r, const std::string& node, std::uint64_t after_tasks) {
  auto s = wait_status(
      r, [&](const nlohmann::json& j) { return done_tasks(j) >= after_tasks; }, std::chrono::seconds(120));
  if (!s) return false;
  pid_t pid = node_pid(r, node);
  if (pid <= 0) return false;
  return ::kill(pid, SIGKILL) == 0;
}

TEST(job_faults, sigkill_a_worker_mid_run_matches_the_undisturbed_run) {
  auto clean = start_job("clean", mlp_job({}));
  ASSERT_EQ(wait_job(clean, std::chrono::seconds(240)), 0) << read_file(clean.err_file);
  auto r = start_job("worker-kill", mlp_job({}));
  ASSERT_TRUE(kill_when_running(r, "worker-1", 3));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto a = result(clean), b = result(r);
  EXPECT_GE(b.value("node_restarts", 0), 1) << b.dump();
  EXPECT_NEAR(b.value("test_accuracy", 0.0), a.value("test_accuracy", 1.0), 0.03) << a.dump() << "\n"
                                                                                  << b.dump();
  auto c = counts(r);
  EXPECT_EQ(c.done, c.total());
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_faults, sigkill_a_ps_shard_restores_its_checkpoint) {
  auto r = start_job("ps-kill", ctr_job(2, 300000, 4));
  // Killed once it has a checkpoint to come back to.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(r.job_dir + "/logs/ps-0.log").find("first checkpoint") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline && !exited(r))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(kill_when_running(r, "ps-0", 1));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GE(res.value("node_restarts", 0), 1);
  EXPECT_GT(res.value("test_auc", 0.0), res.value("true_auc", 1.0) - 0.05) << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/logs/ps-0.log").find("restored checkpoint"), std::string::npos);
  auto c = counts(r);
  EXPECT_EQ(c.done, c.total());
  EXPECT_TRUE(no_processes_of(r));
}

// A restarted PS shard comes back with its gradient-noise estimate (push_noise::state() in its
// checkpoint), so the estimate the workers sum over the shards does not start over with it. The
// MLP over 3 shards (dense_1's tensors on ps-0, as in job_test's async_ps noise test), paced so
// that ps-0 is killed mid-run, once the estimate has 10 pairs and ps-0 has checkpointed since.
TEST(job_faults, a_restarted_ps_shard_keeps_its_noise_scale_estimate) {
  auto toml = mlp_job({.strategy = "async_ps", .epochs = 1, .max_train_rows = 48000, .max_test_rows = 1000});
  toml.replace(toml.find("[model]\n"), 8, "[ps]\nshards = 3\ncheckpoint_every_ms = 200\n[model]\n");
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 2000\n");
  auto r = start_job("ps-kill-noise", toml);
  auto s = wait_status(
      r,
      [](const nlohmann::json& j) {
        const auto g = j.value("goodput", nlohmann::json::object());
        return g.value("push_shards", 0) == 2 && g.value("rounds", 0) >= 10;
      },
      std::chrono::seconds(120));
  ASSERT_TRUE(s) << "no estimate from the shards; " << read_file(r.err_file);
  const int before = (*s)["goodput"].value("rounds", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // ps-0 checkpoints every 200 ms
  const pid_t pid = node_pid(r, "ps-0");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  const auto log = read_file(r.job_dir + "/logs/ps-0.log");
  const auto at = log.find("noise-scale estimate restored (");
  ASSERT_NE(at, std::string::npos) << log;
  const int pairs = std::atoi(log.c_str() + at + std::strlen("noise-scale estimate restored ("));
  std::printf("ps-0 restarted with %d pairs in its estimate (the sum had %d before the kill)\n", pairs,
              before);
  EXPECT_GT(pairs, 0) << log;
  EXPECT_GE(result(r).value("node_restarts", 0), 1);
  auto c = counts(r);
  EXPECT_EQ(c.done, c.total());
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_faults, sigkill_the_master_resumes_from_the_journal) {
  auto r = start_job("master-kill", ctr_job(2, 300000, 4));
  ASSERT_TRUE(kill_when_running(r, "master", 10));
  auto killed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  ASSERT_TRUE(j);
  auto done = j->list(storage::task_state::done);
  ASSERT_TRUE(done);
  auto c = j->counts();
  EXPECT_EQ(done->size(), c->total());
  // A task is leased again only if its lease was lost; never once DONE. At most the tasks in
  // flight when the master died (one per worker) were leased twice.
  std::size_t releases = 0;
  for (const auto& t : *done) releases += t.attempt - 1;
  EXPECT_LE(releases, 2u);
  // The final counts come from durable state, not from the second master's memory.
  auto res = result(r);
  EXPECT_GE(res.value("samples_trained", 0ull), 300000ull * 4) << res.dump();
  EXPECT_EQ(res.value("records_done", 0ull), 300000ull * 4) << res.dump();
  EXPECT_EQ(res.value("master_starts", 0), 2) << res.dump();
  EXPECT_EQ(res.value("tasks_requeued", 0ull), releases) << res.dump();
  EXPECT_LT(res.value("first_step_wall_ms", std::int64_t{0}), killed_ms) << "measured before the restart";
  EXPECT_GT(res.value("first_step_seconds", -1.0), 0.0) << res.dump();
  // Nothing waited for a lease to expire (30 s): reports were resent to the new master. (Said by
  // the dispenser's log, not by the wall time, which a loaded machine stretches.)
  auto master_log = read_file(r.job_dir + "/logs/master.log");
  EXPECT_EQ(master_log.find("expired lease(s) back to TODO"), std::string::npos) << res.dump();
  EXPECT_NE(master_log.find("master#1"), std::string::npos);
  // The timeline's restarts count the master's own relaunch (the dashboard read 0 for it).
  std::int64_t restarts = -1;
  std::istringstream events(read_file(r.job_dir + "/events.jsonl"));
  for (std::string line; std::getline(events, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "metrics") restarts = e.value("restarts", std::int64_t{-1});
  }
  EXPECT_EQ(restarts, res.value("node_restarts", std::int64_t{-2})) << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_faults, scale_up_and_down_while_running) {
  auto r = start_job("scale", ctr_job(1, 600000, 2, 300, "min_workers = 1\n"));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 1 && done_tasks(j) >= 1; },
      std::chrono::seconds(120)));
  std::string out;
  ASSERT_EQ(troupe("scale --workers 3 --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 3; }, std::chrono::seconds(30)));
  ASSERT_EQ(troupe("scale --workers 1 --job-dir " + r.job_dir, &out), 0) << out;
  auto s = wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 1; }, std::chrono::seconds(30));
  ASSERT_TRUE(s);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  auto c = counts(r);
  EXPECT_EQ(c.done, c.total());
  EXPECT_TRUE(no_processes_of(r));
}

// The troupe binary replaced while a job runs (an upgrade, a rebuild: a new file renamed over it):
// the runner's relaunches and scale-ups exec'd "<path> (deleted)" and the healthy job failed
// ("cannot relaunch worker-1: ... exec '.../troupe (deleted)': No such file or directory"); they run
// the image the runner runs, and the model is still exported at the end.
TEST(job_faults, a_binary_replaced_while_the_job_runs_relaunches_and_scales) {
  const std::string bin = test_root("replaced-binary-bin");
  std::filesystem::copy_file(TROUPE_BIN, bin + "/troupe");
  std::filesystem::permissions(bin + "/troupe", std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  job_place place;
  place.binary = bin + "/troupe";
  mlp_options o;
  o.max_train_rows = 30000;
  std::string toml = "max_workers = 4\n" + mlp_job(o);
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 2000\n");  // ~12 s: time to act
  auto r = start_job("replaced-binary", toml, place);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 2 && done_tasks(j) >= 1; },
      std::chrono::seconds(120)));
  std::filesystem::copy_file(TROUPE_BIN, bin + "/troupe.new");
  std::filesystem::rename(bin + "/troupe.new", bin + "/troupe");  // as an install does
  ASSERT_EQ(::kill(node_pid(r, "worker-1"), SIGKILL), 0);
  std::string out;
  ASSERT_EQ(troupe("scale --workers 3 --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 3; }, std::chrono::seconds(60)))
      << read_file(r.job_dir + "/logs/runner.log");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  EXPECT_GE(result(r).value("node_restarts", 0), 1) << result(r).dump();
  EXPECT_TRUE(std::filesystem::exists(r.job_dir + "/model/model.json")) << result(r).dump();
  auto c = counts(r);
  EXPECT_EQ(c.done, c.total());
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_faults, stop_ends_the_job_and_its_processes) {
  auto r = start_job("stop", ctr_job(2, 600000, 3));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)));
  std::string out;
  EXPECT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), 3) << "README: 3 is stopped on request";
  auto res = result(r);
  EXPECT_EQ(res.value("ok", true), false) << res.dump();
  EXPECT_NE(res.value("reason", "").find("troupe stop"), std::string::npos) << res.dump();
  EXPECT_GT(res.value("tasks_done", 0), 0) << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
