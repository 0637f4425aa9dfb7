// Whole jobs, undisturbed: each strategy trains to a sensible metric, every task ends DONE, no
// node process outlives the job, and bad job files are refused with the key named.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "job_harness.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

// The timeline's last metrics event is the job's last figures: result.json's samples (the master
// writes it as it finishes; the runner used to stop it before its next tick, 1-2 s short).
void expect_timeline_ends_at_the_result(const job_run& r) {
  std::uint64_t last = 0;
  std::size_t n = 0;
  std::istringstream in(read_file(r.job_dir + "/events.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "metrics") last = e.value("samples", std::uint64_t{0}), ++n;
  }
  EXPECT_GE(n, 2u) << "the first metrics event and the last";
  EXPECT_EQ(last, result(r).value("samples_trained", std::uint64_t{1})) << result(r).dump();
}

TEST(job, allreduce_trains_fashion_mnist) {
  auto r = start_job("allreduce",
                     mlp_job({.strategy = "allreduce", .max_train_rows = 6000, .max_test_rows = 1000}));
  int rc = wait_job(r, std::chrono::seconds(240));
  ASSERT_EQ(rc, 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GT(res.value("test_accuracy", 0.0), 0.70) << res.dump();
  EXPECT_EQ(res.value("tasks_failed", 1), 0);
  expect_all_done(r);
  expect_timeline_ends_at_the_result(r);
  EXPECT_TRUE(no_processes_of(r));
}

// [train] batch = "global" (docs/goodput.md): the job file's global batch (2 workers x 64) through
// resizes 2 -> 4 -> 3 -> 1 -> 4: each replica cuts ceil(128 / ranks) rows, the status says so, and the
// job still trains every record once. Paced (400 samples/s per worker) so that it runs through them;
// the pace is the compute time its throughput model measures.
TEST(job, global_batch_stays_the_job_files_through_resizes) {
  auto toml = mlp_job({.strategy = "allreduce", .max_train_rows = 16000, .max_test_rows = 1000});
  toml.replace(toml.find("[model]\n"), 8, "max_workers = 4\nmin_workers = 1\n[model]\n");
  toml.replace(toml.find("[train]\n"), 8,
               "[train]\nbatch = \"global\"\nnoise_scale = true\nmax_samples_per_s = 400\n");
  toml.replace(toml.find("epochs = 2"), 10, "epochs = 1");
  auto r = start_job("global-batch", toml);
  for (int ranks : {2, 4, 3, 1, 4}) {
    if (ranks != 2) {
      std::string out;
      ASSERT_EQ(troupe("scale --workers " + std::to_string(ranks) + " --job-dir " + r.job_dir, &out), 0)
          << out;
    }
    const int local = (128 + ranks - 1) / ranks;
    auto s = wait_status(
        r,
        [&](const nlohmann::json& j) {
          const auto g = j.value("goodput", nlohmann::json::object());
          return g.value("replicas", 0) == ranks && g.value("local_batch", 0) == local &&
                 g.value("accum_steps", -1) == 0 && g.value("compute_seconds", 0.0) > 0;
        },
        std::chrono::seconds(90));
    ASSERT_TRUE(s) << ranks << " replicas of " << local << " never reported; " << read_file(r.err_file);
    EXPECT_EQ((*s)["goodput"].value("batch", 0), ranks * local);
    // The pace is the compute time the throughput model sees (not waiting in the allreduce): a
    // micro-batch of `local` rows at 400 rows/s sleeps local / 400 s (a step behind the pace after a
    // resize sleeps less: half of it, in the running mean, is the floor).
    EXPECT_GE((*s)["goodput"].value("compute_seconds", 0.0), 0.5 * local / 400.0) << s->dump();
    if (ranks == 2) {
      // A host (troupe scale --host) for a job whose nodes all run here is refused, naming it; the
      // target stays (the next resize starts from 2).
      std::string refused;
      EXPECT_EQ(troupe("scale --workers 3 --host h9 --job-dir " + r.job_dir, &refused), 2) << refused;
      EXPECT_NE(refused.find("host 'h9': this job runs every node on this machine"), std::string::npos)
          << refused;
      auto now = status(r);
      ASSERT_TRUE(now);
      EXPECT_EQ(now->value("workers_target", 0), 2) << now->dump();
      EXPECT_EQ(now->value("workers_launched", 0), 2) << now->dump();
    }
  }
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("records_done", 0), 16000);
  expect_all_done(r);
}

TEST(job, local_sgd_trains_fashion_mnist) {
  auto r = start_job("local-sgd",
                     mlp_job({.strategy = "local_sgd", .max_train_rows = 6000, .max_test_rows = 1000}));
  int rc = wait_job(r, std::chrono::seconds(240));
  ASSERT_EQ(rc, 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GT(res.value("test_accuracy", 0.0), 0.70) << res.dump();
  expect_all_done(r);
  expect_timeline_ends_at_the_result(r);
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job, async_ps_trains_deepfm_close_to_the_planted_model) {
  auto r = start_job("async-ps", R"(name = "ctr"
strategy = "async_ps"
workers = 2
records_per_task = 2048
[ps]
shards = 2
checkpoint_every_ms = 500
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = 4
batch_size = 256
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = 40000
test_rows = 10000
fields = 6
vocab_per_field = 50
)");
  int rc = wait_job(r, std::chrono::seconds(240));
  ASSERT_EQ(rc, 0) << read_file(r.err_file);
  auto res = result(r);
  // Against the same job trained in one process (`train --local`, deterministic: AUC 0.7894, 0.0276
  // below the planted model's 0.8171 on these 40,000 rows), not against the planted model alone: 12
  // async runs gave 0.7865-0.7897 (2026-12-06), so a bound of 0.03 below the planted model failed
  // one run in six (a CI run at 0.787042 against 0.787062).
  std::string out;
  ASSERT_EQ(
      troupe("train --local " + r.job_dir + "/job.toml --set job.root=" + r.dir + "/local 2>/dev/null", &out),
      0)
      << out;
  const auto local = nlohmann::json::parse(out.substr(out.rfind("\n{") + 1), nullptr, false);
  ASSERT_TRUE(local.is_object()) << out;
  const double auc = res.value("test_auc", 0.0), one = local.value("test_auc", 1.0);
  EXPECT_GT(auc, one - 0.01) << res.dump() << "\none process: " << one;
  EXPECT_GT(auc, res.value("true_auc", 1.0) - 0.04) << res.dump();
  std::printf("async PS AUC %.4f, one process %.4f, planted model %.4f\n", auc, one,
              res.value("true_auc", 1.0));
  // Time to the first trained minibatch (bench/job): after the runner started, before it ended.
  ASSERT_TRUE(res.contains("first_step_seconds")) << res.dump();
  double first = res["first_step_seconds"].get<double>();
  EXPECT_GT(first, 0.0) << res.dump();
  EXPECT_LT(first, res.value("wall_seconds", 0.0)) << res.dump();
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

// async_ps's gradient noise scale is the PS shards' (docs/goodput.md, "async_ps"): each estimates its
// slice of the dense gradient from the pushes it receives and answers every push with it; the status
// reports their sum, and says so.
TEST(job, async_ps_noise_scale_comes_from_the_pushes_the_shards_receive) {
  // The MLP's four dense tensors over 3 shards: dense_1's on ps-0, logits' on ps-2, none on ps-1
  // (wire::shard_of_name), so the sum is of two shards' slices, each a pair in 8 x 2 pushes. Paced
  // (2,000 samples/s a worker, ~6 s) so that the status is read while it trains.
  auto toml = mlp_job({.strategy = "async_ps", .epochs = 1, .max_train_rows = 24000, .max_test_rows = 1000});
  toml.replace(toml.find("[model]\n"), 8, "[ps]\nshards = 3\n[model]\n");
  toml.replace(toml.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 2000\n");
  auto r = start_job("push-noise", toml);
  auto s = wait_status(
      r,
      [](const nlohmann::json& j) {
        const auto g = j.value("goodput", nlohmann::json::object());
        return g.value("push_shards", 0) > 0 && g.value("rounds", 0) >= 10;
      },
      std::chrono::seconds(120));
  ASSERT_TRUE(s) << "no estimate from the shards; " << read_file(r.err_file);
  const auto g = (*s)["goodput"];
  std::printf("from %d shard(s): |G|^2 %g, tr/M0 %g, noise scale %g samples, %d pairs\n",
              g.value("push_shards", 0), g.value("grad_sqr", 0.0), g.value("grad_var", 0.0),
              g["noise_scale"].is_number() ? g["noise_scale"].get<double>() : -1.0, g.value("rounds", 0));
  EXPECT_EQ(g.value("push_shards", 0), 2) << "the two shards holding dense tensors";
  EXPECT_EQ(g.value("base_batch", 0), 2 * 64);
  EXPECT_GT(g.value("grad_var", 0.0), 0.0);
  ASSERT_TRUE(g["noise_scale"].is_number()) << "finite: " << g.dump();
  EXPECT_GT(g["noise_scale"].get<double>(), 0.0) << g.dump();
  std::string out;
  if (troupe("status --job-dir " + r.job_dir, &out) == 0) {  // the job may have ended meanwhile
    EXPECT_NE(out.find("from the pushes 2 PS shards received)\n"), std::string::npos) << out;
    // No ring batch or goodput of its own to show (it read "batch 64 = 1 x 64 x 1 ... goodput 0").
    EXPECT_EQ(out.find("goodput 0 samples/s"), std::string::npos) << out;
  }
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  expect_all_done(r);
}

// Tasks that train for longer than their lease: without renewals (TaskRenew) the dispenser would
// re-queue each one mid-training and hand it out again (attempt 2, the first report refused as
// stale). Renewed every third of the lease, every task is leased once and nothing is re-queued. The
// lease is 1.5 s so that a worker descheduled for a few hundred milliseconds on a loaded machine
// still renews in time (with 500 ms, two tasks were re-queued once in a -j 2 suite run).
TEST(job, a_task_longer_than_its_lease_is_renewed_not_requeued) {
  // Tasks of 120,000 records: about 3 s each here against a 1.5 s lease (the premise: a task outlives
  // its lease; 20,000 records took 0.45 s once the async_ps step got cheaper).
  auto r = start_job("renew", R"(name = "ctr"
strategy = "async_ps"
workers = 2
records_per_task = 120000
lease_timeout_ms = 1500
[ps]
shards = 2
checkpoint_every_ms = 500
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = 2
batch_size = 16
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = 240000
test_rows = 2000
fields = 6
vocab_per_field = 50
)");
  int rc = wait_job(r, std::chrono::seconds(240));
  ASSERT_EQ(rc, 0) << read_file(r.err_file);
  auto res = result(r);
  // Two tasks per worker, one after the other: they did last longer than their lease.
  EXPECT_GT(res.value("master_seconds", 0.0), 2 * 1.5) << res.dump();
  EXPECT_EQ(res.value("tasks_requeued", -1), 0) << res.dump();
  expect_all_done(r);
  auto j = storage::task_journal::open(r.job_dir + "/journal");
  ASSERT_TRUE(j) << j.err().to_string();
  auto done = j->list(storage::task_state::done);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->size(), 4u);
  for (const auto& t : *done) EXPECT_EQ(t.attempt, 1u) << "task " << t.id << " was leased again";
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job, bad_job_file_names_the_key_and_exits_2) {
  auto dir = test_root("bad");
  std::string file = dir + "/bad.toml";
  std::ofstream(file) << "[job]\nstrategy = \"sideways\"\n";
  std::string out;
  EXPECT_EQ(troupe("run " + file, &out), 2);
  EXPECT_NE(out.find("job.strategy"), std::string::npos) << out;
  std::ofstream(file) << "[job]\nworkers = 9\nmax_workers = 4\n";
  EXPECT_EQ(troupe("run " + file, &out), 2);
  EXPECT_NE(out.find("job.workers"), std::string::npos) << out;
}

// `troupe run` reads [cluster] (the launcher it starts nodes with): bad keys and values are named.
TEST(job, bad_cluster_section_names_the_key_and_exits_2) {
  auto dir = test_root("bad-cluster");
  std::string file = dir + "/bad.toml";
  std::ofstream(file) << "[cluster]\nlaucher = \"local\"\n";
  std::string out;
  EXPECT_EQ(troupe("run " + file, &out), 2);
  EXPECT_NE(out.find("cluster.laucher"), std::string::npos) << out;
  EXPECT_NE(out.find("bad.toml"), std::string::npos) << out;
  std::ofstream(file) << "[cluster]\nlauncher = \"mesos\"\n";
  EXPECT_EQ(troupe("run " + file, &out), 2);
  EXPECT_NE(out.find("cluster.launcher"), std::string::npos) << out;
  std::ofstream(file) << "[cluster]\ncapacity_cpus = -2\n";
  EXPECT_EQ(troupe("run " + file, &out), 2);
  EXPECT_NE(out.find("cluster.capacity_cpus"), std::string::npos) << out;
}

TEST(job, ring_strategy_refuses_a_model_with_embeddings) {
  auto r = start_job("ring-embeddings", R"(strategy = "allreduce"
name = "bad"
[model]
type = "deepfm"
[data]
source = "synthetic-ctr"
rows = 2000
test_rows = 500
fields = 4
vocab_per_field = 20
)");
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 2);
  EXPECT_NE(read_file(r.err_file).find("use [job] strategy = \"async_ps\""), std::string::npos)
      << read_file(r.err_file);
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
