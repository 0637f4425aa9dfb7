// The chaos suite (ctest -L chaos): each scenario runs a job undisturbed, then the same job (same
// seed) under `troupe chaos`, and checks the invariants of chaos_harness.hpp.
#include <gtest/gtest.h>

#include "chaos_harness.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

nlohmann::json clean_result(const std::string& name, const std::string& toml) {
  auto r = start_job(name + "-clean", toml);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  return result(r);
}

// Every fault of these kinds hit a node and the job detected and recovered from it.
void expect_recovered(const nlohmann::json& report, const std::string& kind) {
  for (const auto& f : report.value("faults", nlohmann::json::array())) {
    if (f["kind"] != kind || f.value("pid", 0) == 0) continue;
    EXPECT_FALSE(f["detected_s"].is_null()) << f.dump();
    if (f.value("note", std::string()).empty()) {
      EXPECT_FALSE(f["recovered_s"].is_null()) << f.dump();
    }
  }
}

TEST(chaos, smoke_worker_killed_once) {
  auto toml = mlp_job({.workers = 2, .epochs = 8, .batch_size = 128});
  auto clean = clean_result("smoke", toml);
  // worker-0: its replacement is rank 0 of the new ring, yet must take the survivor's model.
  auto c = run_under_chaos("smoke", toml, "--fault '1 kill worker-0'");
  expect_invariants(c, clean, "test_accuracy", 0.03);
  EXPECT_EQ(faults_injected(c.report, "kill"), 1u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

TEST(chaos, workers_killed_repeatedly) {
  auto toml = ctr_job(3, 300000, 10);
  auto clean = clean_result("workers", toml);
  auto c = run_under_chaos("workers", toml,
                           "--fault '1 kill worker' --fault '2.5 kill worker' --fault '4 kill worker' "
                           "--fault '5.5 kill worker'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_GE(faults_injected(c.report, "kill"), 3u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

TEST(chaos, ps_shard_killed) {
  // Paced (100k samples/s a worker: about 6 s of training) so that the kill at 2 s lands mid-job
  // however fast the machine: unpaced on a quiet machine the job ended at 2.2 s, and the kill counted
  // as "job finished before recovery was seen" (2026-12-03), as all_workers_killed_at_once did.
  auto toml = ctr_job(2, 300000, 4);
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 100000\n");
  auto clean = clean_result("ps", toml);
  auto c = run_under_chaos("ps", toml, "--fault '2 kill ps-0'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_EQ(faults_injected(c.report, "kill"), 1u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

TEST(chaos, master_killed) {
  auto toml = ctr_job(2, 300000, 10);
  auto clean = clean_result("master", toml);
  auto c = run_under_chaos("master", toml, "--fault '2 kill master'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_EQ(faults_injected(c.report, "kill"), 1u) << c.report.dump();
}

// Hung (SIGSTOP) longer than the heartbeat timeout: declared dead, its task re-queued, fenced by
// the runner and replaced by a new incarnation; the job completes (no orphan).
TEST(chaos, worker_hung_with_sigstop) {
  auto toml = ctr_job(3, 300000, 8);
  auto clean = clean_result("hung", toml);
  auto c = run_under_chaos("hung", toml, "--fault '1.5 stop worker-1 hold=5'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_EQ(faults_injected(c.report, "stop"), 1u) << c.report.dump();
  expect_recovered(c.report, "stop");
  // Declared dead: the task it held went back to TODO.
  for (const auto& f : c.report["faults"]) EXPECT_GE(f.value("requeued", 0), 1) << f.dump();
}

// Hung for longer than the whole job (hold=600: chaos never resumes it while the job runs): the
// runner must not wait for the stopped process to exit. Once the master declares it dead it is
// fenced (SIGKILL to its group through the launcher) and its replacement trains.
TEST(chaos, hung_worker_is_fenced_without_sigcont) {
  auto toml = ctr_job(3, 300000, 8);
  auto clean = clean_result("fenced", toml);
  auto c = run_under_chaos("fenced", toml, "--fault '1.5 stop worker-1 hold=600'");
  expect_invariants(c, clean, "test_auc", 0.02);
  ASSERT_EQ(faults_injected(c.report, "stop"), 1u) << c.report.dump();
  const auto& f = c.report["faults"][0];
  EXPECT_FALSE(f["detected_s"].is_null()) << f.dump();
  EXPECT_FALSE(f["recovered_s"].is_null()) << "no new incarnation of worker-1 trained: " << f.dump();
  EXPECT_TRUE(f["resumed_s"].is_null()) << "the stopped process got a SIGCONT: " << f.dump();
  EXPECT_GE(f.value("restarts", 0), 1) << "the runner relaunched nothing: " << f.dump();
  // Its log: incarnation 0 killed by SIGKILL (a stopped process exits no other way), then
  // incarnation 1 started, while the job still ran.
  auto log = read_file(c.job_dir + "/logs/worker-1.log");
  auto killed = log.find("worker-1#0 pid");
  ASSERT_NE(killed, std::string::npos) << log;
  auto eol = log.find('\n', killed);
  EXPECT_NE(log.substr(killed, eol - killed).find("killed by SIGKILL"), std::string::npos)
      << log.substr(killed, eol - killed);
  EXPECT_NE(log.find("start worker-1#1", killed), std::string::npos) << log;
}

// The job's journal: every task DONE (once: the journal's DONE is final). A lease reply on its way
// when the master stopped is lost with the connection its peer dropped, and that task is leased
// again without having been trained: at most the two leases each of the 2 workers may hold.
void expect_each_task_done_once(const std::string& job_dir) {
  job_run r;
  r.job_dir = job_dir;
  expect_all_done(r);
  auto j = storage::task_journal::open(job_dir + "/journal");
  ASSERT_TRUE(j);
  auto done = j->list(storage::task_state::done);
  ASSERT_TRUE(done);
  std::size_t releases = 0;
  for (const auto& t : *done) releases += t.attempt - 1;
  EXPECT_LE(releases, 4u);
}

// A master paused for less than the runner's fence (3 heartbeat timeouts) but longer than the
// heartbeat timeout: its peers drop it and come back, and it keeps them. Nothing restarts; the
// report says the stopped master was resumed, not declared dead.
TEST(chaos, master_paused_shorter_than_the_fence_costs_nothing) {
  auto c = run_under_chaos("masterpause", ctr_job(2, 300000, 4), "--fault '2 stop master hold=1.5'");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto master_log = read_file(c.job_dir + "/logs/master.log");
  // The pause did cost the master its connections (else this test proves nothing).
  EXPECT_NE(master_log.find("dropped its connection while this master was paused"), std::string::npos)
      << master_log;
  auto res = nlohmann::json::parse(read_file(c.job_dir + "/result.json"), nullptr, false);
  ASSERT_TRUE(res.is_object());
  EXPECT_EQ(res.value("node_restarts", -1), 0) << res.dump();
  ASSERT_EQ(c.report["faults"].size(), 1u) << c.report.dump();
  const auto& f = c.report["faults"][0];
  EXPECT_EQ(f.value("kind", ""), "stop") << f.dump();
  EXPECT_FALSE(f["resumed_s"].is_null()) << f.dump();
  EXPECT_TRUE(f["detected_s"].is_null()) << f.dump();
  EXPECT_EQ(f.value("restarts", -1), 0) << f.dump();
  EXPECT_EQ(f.value("note", ""), "resumed before it was declared dead") << f.dump();
  expect_each_task_done_once(c.job_dir);
  job_run r;
  r.job_dir = c.job_dir;
  EXPECT_TRUE(no_processes_of(r));
}

// Paused for longer than the fence: the runner fences and relaunches the master (only it), and the
// report counts that restart.
TEST(chaos, master_paused_longer_than_the_fence_is_replaced_and_counted) {
  auto c = run_under_chaos("masterfence", ctr_job(2, 300000, 6), "--fault '2 stop master hold=8'");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto res = nlohmann::json::parse(read_file(c.job_dir + "/result.json"), nullptr, false);
  ASSERT_TRUE(res.is_object());
  EXPECT_EQ(res.value("node_restarts", -1), 1) << res.dump();
  ASSERT_EQ(c.report["faults"].size(), 1u) << c.report.dump();
  const auto& f = c.report["faults"][0];
  EXPECT_FALSE(f["detected_s"].is_null()) << f.dump();
  EXPECT_TRUE(f["resumed_s"].is_null()) << "the fenced master got a SIGCONT: " << f.dump();
  EXPECT_EQ(f.value("restarts", -1), 1) << f.dump();
  // The timeline says it was fenced, as a worker's fence is (it read as a kill only).
  auto events = read_file(c.job_dir + "/events.jsonl");
  EXPECT_NE(events.find(R"("kind":"fenced","node":"master#0")"), std::string::npos) << events;
  job_run r;
  r.job_dir = c.job_dir;
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

TEST(chaos, all_workers_killed_at_once) {
  // Paced (100k samples/s a worker: about 4 s of training) so that the kills at 2 s land mid-job
  // however fast the machine: unpaced on a quiet machine the job ended at 2.2 s, before the
  // replacements had anything to train, and "recovered" stayed empty (a flake, 2026-11-29).
  auto toml = ctr_job(3, 300000, 4);
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 100000\n");
  auto clean = clean_result("allworkers", toml);
  auto c = run_under_chaos("allworkers", toml,
                           "--fault '2 kill worker-0' --fault '2 kill worker-1' --fault '2 kill worker-2'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_EQ(faults_injected(c.report, "kill"), 3u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

TEST(chaos, kills_during_checkpoint_writes) {
  auto toml = ctr_job(2, 300000, 8, 20);
  auto clean = clean_result("checkpoints", toml);
  auto c = run_under_chaos("checkpoints", toml,
                           "--fault '1.5 kill ps-0' --fault '3 kill ps-1' --fault '4.5 kill ps-0' "
                           "--fault '6 kill ps-1'");
  expect_invariants(c, clean, "test_auc", 0.03);
  EXPECT_GE(faults_injected(c.report, "kill"), 2u) << c.report.dump();
}

TEST(chaos, kills_during_allreduce) {
  // 12 epochs (about 4.5 s here): at 8 the job could end within the third kill's detection.
  auto toml = mlp_job({.workers = 3, .epochs = 12, .batch_size = 128});
  auto clean = clean_result("allreduce", toml);
  auto c = run_under_chaos("allreduce", toml,
                           "--fault '1 kill worker' --fault '2 kill worker' --fault '3 kill worker'");
  expect_invariants(c, clean, "test_accuracy", 0.03);
  EXPECT_GE(faults_injected(c.report, "kill"), 2u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

// A model of 5.8M parameters (23 MB of gradients): its workers, both on this host, allreduce through
// the fused pipeline on 2 lanes each (shm/pipeline.cpp), and a kill lands in one of them.
TEST(chaos, kills_during_a_fused_allreduce_on_lanes) {
  auto toml = mlp_job({.workers = 2, .epochs = 2, .batch_size = 128, .max_train_rows = 12000});
  toml = "ring_lanes = 2\n" + toml;
  toml.replace(toml.find("hidden = [64]"), 13, "hidden = [2048, 2048]");
  auto clean = clean_result("fused", toml);
  auto c = run_under_chaos("fused", toml, "--fault '3 kill worker-1'");
  expect_invariants(c, clean, "test_accuracy", 0.03);
  EXPECT_EQ(faults_injected(c.report, "kill"), 1u) << c.report.dump();
  expect_recovered(c.report, "kill");
}

TEST(chaos, fault_storm_of_random_kills) {
  // Long enough to outlast the 12 s storm (a job that ends first cuts the storm short): paced at
  // 80k samples/s a worker, about 15 s, however fast the machine (unpaced on a quiet machine it ended
  // at 6.9 s, after 14 of the 20 kills, 2026-12-03).
  auto toml = ctr_job(3, 600000, 6);
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 80000\n");
  auto clean = clean_result("storm", toml);
  auto c = run_under_chaos(
      "storm", toml, "--seed 7 --rate 3 --duration 12 --start 1 --targets worker,ps,master --settle 20");
  expect_invariants(c, clean, "test_auc", 0.03);
  EXPECT_GE(faults_injected(c.report, "kill"), 20u) << c.report.dump();
}

// The transport knob (JobMessage.inject): delays slow the job down but lose nothing. (Drops are
// not in the suite: a dropped lease reply or task report waits for the 30 s lease timeout.)
TEST(chaos, messages_delayed) {
  auto toml = ctr_job(2, 300000, 4);
  auto clean = clean_result("delay", toml);
  auto c = run_under_chaos(
      "delay", toml, "--fault '1 delay worker-0 us=3000 hold=2' --fault '1.5 delay ps-0 us=3000 hold=2'");
  expect_invariants(c, clean, "test_auc", 0.02);
  EXPECT_EQ(faults_injected(c.report, "delay"), 2u) << c.report.dump();
  EXPECT_NE(read_file(c.job_dir + "/logs/worker-0.log").find("fault injection from"), std::string::npos);
  EXPECT_NE(read_file(c.job_dir + "/logs/ps-0.log").find("fault injection from"), std::string::npos);
}

}  // namespace
}  // namespace troupe::testing
