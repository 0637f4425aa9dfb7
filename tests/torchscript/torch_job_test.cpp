// Users' PyTorch modules as troupe jobs (issue 27), with real kills: a scripted MLP under allreduce
// loses a worker to SIGKILL, a scripted DeepFM-style model under async_ps loses a PS shard; every
// task ends DONE once, and the metric is within 0.01 of the same module trained by plain PyTorch
// in Python (reference.py) on the records troupe prepared, exported by export_records.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "../job/job_harness.hpp"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(::pclose(p), 0) << cmd << "\n" << out;
  return out;
}

// The module files, written once per test process.
std::string modules() {
  static std::string dir = [] {
    auto d = fs::temp_directory_path() / ("troupe-torch-job-" + std::to_string(::getpid()));
    fs::create_directories(d);
    run("/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/make_modules.py " + d.string());
    run("/usr/bin/python3 " TROUPE_SOURCE_DIR "/examples/torch/deepfm.py 6 4 8 " +
        (d / "deepfm.pt").string());
    return d.string();
  }();
  return dir;
}

// The one record store pair the job prepared in its own dataset cache, exported for reference.py.
std::pair<std::string, std::string> export_stores(const std::string& cache, const std::string& out) {
  for (const auto& e : fs::directory_iterator(cache)) {
    if (!fs::is_directory(e.path() / "train")) continue;
    for (const char* part : {"train", "test"})
      run(std::string(TROUPE_EXPORT_RECORDS) + " " + (e.path() / part).string() + " " + out + "." + part);
    return {out + ".train", out + ".test"};
  }
  ADD_FAILURE() << "no record store in " << cache;
  return {};
}

nlohmann::json reference(const std::string& module, const std::pair<std::string, std::string>& data,
                         const std::string& args) {
  auto out = run("/usr/bin/python3 " TROUPE_TEST_SOURCE_DIR "/reference.py " + module + " " + data.first +
                 " " + data.second + " " + args);
  return nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
}

bool kill_after(job_run& r, const std::string& node, std::uint64_t tasks) {
  auto s = wait_status(
      r, [&](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= tasks; },
      std::chrono::seconds(180));
  pid_t pid = s ? node_pid(r, node) : 0;
  return pid > 0 && ::kill(pid, SIGKILL) == 0;
}

// A small Fashion-MNIST job of a module in modules() (or `path` as written); `extra` goes after it.
std::string small_torch_job(const std::string& path, const std::string& extra = "",
                            int records_per_task = 1000) {
  return R"(name = "torch-small"
strategy = "allreduce"
workers = 2
records_per_task = )" +
         std::to_string(records_per_task) + R"(
[model]
type = "torchscript"
path = ")" +
         path + R"("
[train]
epochs = 2
batch_size = 64
optimizer = "adam"
learning_rate = 0.002
[data]
source = "fashion-mnist"
max_train_rows = 4000
max_test_rows = 2000
)" + extra;
}

// Issue 44: a module whose evaluation fails retried it for ever (2,831 lines in 5 minutes), the
// progress line never naming why. Now it is retried max_task_failures times, then the job ends
// with exit 1 and result.json names the model's error and where it failed.
TEST(torch_job, a_module_whose_evaluation_fails_ends_the_job_naming_its_error) {
  auto r = start_job("torch-eval-fails", small_torch_job(modules() + "/fails_on_real_evaluation.pt"));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_FALSE(res.value("ok", true)) << res.dump();
  EXPECT_EQ(res.value("status", ""), "failed") << res.dump();
  const auto reason = res.value("reason", "");
  EXPECT_NE(reason.find("evaluation of the trained model failed 3 times"), std::string::npos) << res.dump();
  EXPECT_NE(reason.find("no evaluation on real rows here"), std::string::npos) << res.dump();
  EXPECT_NE(reason.find("worker-"), std::string::npos) << res.dump();  // where it failed
  // Every task was trained once before: the job did its work, only the model's evaluation failed.
  expect_all_done(r);
  const auto log = read_file(r.job_dir + "/logs/master.log");
  std::size_t failures = 0;
  for (auto at = log.find("evaluation on"); at != std::string::npos; at = log.find("evaluation on", at + 1))
    failures += log.compare(log.find(' ', at + 14) + 1, 6, "failed") == 0;
  EXPECT_EQ(failures, 3u) << log;
  EXPECT_TRUE(no_processes_of(r));
}

// A model whose training loss is NaN (it diverged, or computes a NaN) ends its job: its tasks fail
// ("training diverged"), are quarantined, and the job fails saying so (it finished "ok" with NaN
// weights, a test accuracy of 0.1 and no word of it).
TEST(torch_job, a_model_whose_loss_is_nan_fails_its_job_saying_it_diverged) {
  auto r = start_job("torch-nan", small_torch_job(modules() + "/nan_when_training.pt"));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "failed") << res.dump();
  EXPECT_NE(res.value("reason", "").find("training diverged: the loss of step"), std::string::npos)
      << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

// A worker's warm-up step (a forward and backward before it joins, to warm its caches) leaves the
// module's buffers as they were: batch norm's running statistics saw the first batch twice, and a
// module counting its training forwards counted 129 for 128 steps. One worker: 8 tasks of 1,000 rows,
// 16 steps each at 64.
TEST(torch_job, the_warm_up_step_moves_no_buffer) {
  auto job = small_torch_job(modules() + "/counts_training_forwards.pt");
  job.replace(job.find("workers = 2"), 11, "workers = 1\nmax_workers = 1");
  auto r = start_job("torch-warm-up", job);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto calls = run("/usr/bin/python3 -c \"import torch; print(int(torch.jit.load('" + r.job_dir +
                   "/model/model.pt').calls.item()))\"");
  EXPECT_EQ(std::atoi(calls.c_str()), 128) << calls << result(r).dump();
  // `troupe export` of a user's module checks no rows: it says so, and no logit difference ("0.0" on
  // 0 rows read as a check passed).
  std::string out;
  ASSERT_EQ(troupe("export " + r.job_dir + " --out " + r.dir + "/again 2>/dev/null", &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
  EXPECT_EQ(j.value("verified_rows", -1), 0) << out;
  EXPECT_FALSE(j.contains("max_abs_logit_diff")) << out;
}

// A task whose step fails partway goes back with the rows trained before that step, and its retry
// starts there: no row is trained twice. One worker (allreduce, then async_ps), 2 epochs of 4 tasks of
// 1,000 rows, 16 steps each at 64: the module raises once, on its 20th training forward (the second
// task's 4th step), and the job still trains 128 steps (before 2026-12-06 the retry trained the task
// whole: 131, its first 3 steps twice).
TEST(torch_job, a_task_that_fails_partway_is_tried_again_from_its_failing_step) {
  for (std::string strategy : {"allreduce", "async_ps"}) {
    SCOPED_TRACE(strategy);
    auto job = small_torch_job(modules() + "/fails_once_mid_task.pt");
    job.replace(job.find("workers = 2"), 11, "workers = 1\nmax_workers = 1");
    job.replace(job.find("strategy = \"allreduce\""), 22, "strategy = \"" + strategy + "\"");
    const auto steps = test_root("torch-fails-once-steps-" + strategy);
    ::setenv("TROUPE_STEP_LOG", steps.c_str(), 1);
    auto r = start_job("torch-fails-once-" + strategy, job);
    const int rc = wait_job(r, std::chrono::seconds(240));
    ::unsetenv("TROUPE_STEP_LOG");
    ASSERT_EQ(rc, 0) << read_file(r.err_file);
    expect_all_done(r);
    std::size_t trained = 0;
    for (const auto& e : fs::directory_iterator(steps)) {
      std::ifstream in(e.path());
      for (std::string line; std::getline(in, line);) trained += !line.empty();
    }
    EXPECT_EQ(trained, 128u);
    std::string logs;
    for (const auto& e : fs::directory_iterator(r.job_dir + "/logs")) logs += read_file(e.path().string());
    const auto failed =
        logs.find("failed on worker-0#0 (tried again from its failing step, 192 rows trained kept)");
    ASSERT_NE(failed, std::string::npos) << logs;
    EXPECT_NE(logs.find("a fault of training forward 20", failed), std::string::npos) << logs;
    EXPECT_NE(logs.find("192 of its 1000 rows were trained by an earlier holder"), std::string::npos) << logs;
  }
}

// [model] init into an async_ps job carries the module's buffers too (the shards take the parameters;
// the buffers, each worker's own, were dropped: a counter of 128 training forwards started again at 0).
TEST(torch_job, init_into_an_async_ps_job_carries_the_buffers) {
  auto job = small_torch_job(modules() + "/counts_training_forwards.pt");
  job.replace(job.find("workers = 2"), 11, "workers = 1\nmax_workers = 1");
  job.replace(job.find("strategy = \"allreduce\""), 22, "strategy = \"async_ps\"");
  auto first = start_job("torch-init-a", job);
  ASSERT_EQ(wait_job(first, std::chrono::seconds(240)), 0) << read_file(first.err_file);
  job.replace(job.find("[model]\n"), 8, "[model]\ninit = \"" + first.job_dir + "/model\"\n");
  auto second = start_job("torch-init-b", job);
  ASSERT_EQ(wait_job(second, std::chrono::seconds(240)), 0) << read_file(second.err_file);
  auto calls = [](const job_run& r) {
    return std::atoi(run("/usr/bin/python3 -c \"import torch; print(int(torch.jit.load('" + r.job_dir +
                         "/model/model.pt').calls.item()))\"")
                         .c_str());
  };
  EXPECT_EQ(calls(first), 128);
  EXPECT_EQ(calls(second), 256) << "the second job's 128 on top of the first's";
}

// Tasks that end in a batch of one row (records_per_task 65 in batches of 64) with a module that cannot
// train on one (batch norm): refused before the job starts, naming the key (each task failed at its end,
// "Expected more than 1 value per channel when training", and the job with them).
TEST(torch_job, tasks_ending_in_one_row_with_a_batch_norm_module_are_refused_first) {
  const auto dir = test_root("torch-one-row");
  auto file = [&](int per_task) {
    const auto path = dir + "/job" + std::to_string(per_task) + ".toml";
    std::ofstream(path) << "[job]\ndataset_cache = \"" << dataset_cache() << "\"\n"
                        << small_torch_job(modules() + "/normed_mnist.pt", "", per_task);
    return path;
  };
  std::string out;
  EXPECT_EQ(troupe("config check " + file(65) + " 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("key 'job.records_per_task': 65 records a task in batches of 64 (train.batch_size) end "
                     "each task in a batch of 1 row, and the module cannot train on one row"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("e.g. 64"), std::string::npos) << out;
  EXPECT_EQ(troupe("config check " + file(66) + " 2>&1", &out), 0) << out;
  EXPECT_EQ(troupe("config check " + file(65) + " --set model.path=" + modules() + "/mlp.pt 2>&1", &out), 0)
      << "a module that trains on one row: " << out;
  // Under batch = "global" the ring chooses the batches, and a worker folds a lone row (below).
  EXPECT_EQ(troupe("config check " + file(193) + " 2>&1", &out), 2) << out;
  EXPECT_EQ(troupe("config check " + file(193) + " --set train.batch=global 2>&1", &out), 0) << out;
  // Not 129 (2 x 64 + 1) there: the 4,000 training rows (the labels file's header and max_train_rows)
  // leave a last task of one record, which config check passed and run refused.
  EXPECT_EQ(troupe("config check " + file(129) + " --set train.batch=global 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("4000 records in tasks of 129 leave a last task of 1 record"), std::string::npos) << out;
  // Where no fold mends it: a batch of one row (it passed, and every task failed). A ring of as many
  // workers as its global batch has rows trains 2 rows a worker (below): not refused.
  EXPECT_EQ(troupe("config check " + file(66) + " --set train.batch_size=1 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("key 'train.batch_size': 1 trains every batch on one row, and the module cannot train "
                     "on one row"),
            std::string::npos)
      << out;
  const auto ring = "config check " + file(193) + " --set train.batch=global --set train.batch_size=4";
  EXPECT_EQ(troupe(ring + " 2>&1", &out), 0) << out;
}

// A normed_mnist job of `rows` training rows in tasks of 1,000 (`batch`: "fixed" or "global") is
// refused with `refusal` and the records_per_task it suggests: by `config check` (the training rows
// from the Fashion-MNIST labels file's header and max_train_rows; it said ok, and the job was refused
// only by `run`), and by `run` once the runner has read the training store, before any node starts.
void expect_last_task_refused(const std::string& name, int rows, const std::string& batch,
                              const std::string& refusal, const std::string& suggested) {
  auto toml = small_torch_job(modules() + "/normed_mnist.pt");
  toml.replace(toml.find("max_train_rows = 4000"), 21, "max_train_rows = " + std::to_string(rows));
  toml.replace(toml.find("batch_size = 64"), 15, "batch_size = 64\nbatch = \"" + batch + "\"");
  const auto file = test_root(name + "-check") + "/job.toml";
  std::ofstream(file) << "[job]\ndataset_cache = \"" << dataset_cache() << "\"\n" << toml;
  std::string out;
  EXPECT_EQ(troupe("config check " + file + " 2>&1", &out), 2) << out;
  EXPECT_NE(out.find(refusal + ", and the module cannot train on one row"), std::string::npos) << out;
  EXPECT_NE(out.find("e.g. " + suggested), std::string::npos) << out;
  auto r = start_job(name, toml);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 2) << read_file(r.err_file);
  const auto err = read_file(r.err_file);
  EXPECT_NE(err.find(refusal + ", and the module cannot train on one row"), std::string::npos) << err;
  EXPECT_NE(err.find("e.g. " + suggested), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(r.job_dir + "/nodes.json")) << "a node started";
}

// The same for the last task of an epoch only: 3,065 rows in tasks of 1,000 leave a last task of 65,
// whose last batch (of 64) is 1 row. Refused as the runner has read the training store, naming the key
// and a value that leaves no single row (the task failed at its end each time, then the job): 999,
// tasks ending in 39 rows, the last in 4.
TEST(torch_job, a_last_task_ending_in_one_row_with_a_batch_norm_module_is_refused_first) {
  expect_last_task_refused("torch-last-row", 3065, "fixed",
                           "key 'job.records_per_task': the training data's 3065 records in tasks of 1000 "
                           "leave a last task of 65 records each epoch, which ends in a batch of 1 row "
                           "(train.batch_size 64)",
                           "999");
}

// Under batch = "global" a lone row at a task's end is folded into the batch before it, but an epoch's
// last task of one record (3,001 rows in tasks of 1,000) is a batch of one row whatever the ring's
// batch: refused the same way (config check and run said nothing, and the job failed at its end).
TEST(torch_job, a_last_task_of_one_record_under_the_rings_batches_is_refused_first) {
  expect_last_task_refused("torch-last-record", 3001, "global",
                           "key 'job.records_per_task': the training data's 3001 records in tasks of 1000 "
                           "leave a last task of 1 record each epoch, which is a batch of 1 row whatever "
                           "the ring's batch (train.batch = \"global\")",
                           "999");
}

// batch = "global" (the ring chooses each worker's batch): batch_size 65 and max_local_batch 32 make a
// worker's batch 66 rows in micro-batches of 22 in a ring of two, 130 in micro-batches of 26 alone.
// Tasks of 859 rows end in a single row after 13 batches of 66, and in a micro-batch of one after 79
// rows alone; the epoch's last task (3,150 rows modulo 859 = 573) does too. A batch norm module failed
// there, and the job with it (config check, looking at batch_size, saw nothing). A worker folds such
// a row into the batch (or micro-batch) before it: every row trains once.
TEST(torch_job, a_batch_norm_module_trains_where_the_rings_batches_would_leave_one_row) {
  auto toml = small_torch_job(modules() + "/normed_mnist.pt", "", 859);
  toml.replace(toml.find("batch_size = 64"), 15, "batch_size = 65\nbatch = \"global\"\nmax_local_batch = 32");
  toml.replace(toml.find("max_train_rows = 4000"), 21, "max_train_rows = 3150");
  auto r = start_job("torch-ring-one-row", toml);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  expect_all_done(r);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0), 2 * 3150) << res.dump();
  EXPECT_EQ(res.value("samples_trained", 0), res.value("records_done", 1)) << res.dump();
  EXPECT_EQ(res.value("tasks_requeued", 1), 0) << res.dump();
}

// batch = "global" of 1 worker x 2 rows scaled to 3 workers: each one's share of the global batch,
// ceil(2 / 3), was 1 row, and a batch norm module failed every task from the scale on (8 quarantined
// in a row, the job gave up). A share is 2 rows at the least: the ring trains 3 x 2, every row once.
TEST(torch_job, a_ring_of_more_workers_than_its_global_batch_has_rows_trains_two_rows_each) {
  auto toml = small_torch_job(modules() + "/normed_mnist.pt", "", 200);
  toml.replace(toml.find("workers = 2"), 11, "workers = 1\nmax_workers = 3");
  toml.replace(toml.find("batch_size = 64"), 15,
               "batch_size = 2\nbatch = \"global\"\nmax_samples_per_s = 150");
  toml.replace(toml.find("epochs = 2"), 10, "epochs = 1");
  toml.replace(toml.find("max_train_rows = 4000"), 21, "max_train_rows = 3000");
  auto r = start_job("torch-ring-two-rows", toml);
  auto alone = wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 1; },
      std::chrono::seconds(120));
  ASSERT_TRUE(alone) << read_file(r.err_file);
  std::string out;
  ASSERT_EQ(troupe("scale --workers 3 --job-dir " + r.job_dir, &out), 0) << out;
  auto s = wait_status(
      r,
      [](const nlohmann::json& j) {
        const auto g = j.value("goodput", nlohmann::json::object());
        return g.value("replicas", 0) == 3 && g.value("local_batch", 0) == 2;
      },
      std::chrono::seconds(120));
  EXPECT_TRUE(s) << "3 replicas of 2 rows never reported; " << read_file(r.err_file);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  expect_all_done(r);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0), 3000) << res.dump();
  EXPECT_EQ(res.value("tasks_failed", 1), 0) << res.dump();
}

// A model whose outputs are NaN for some test rows in eval mode: the job finishes (its model is
// written: troupe predict names the rows) and its reason and result.json say so (it ended "ok" with a
// null test_loss and not a word).
TEST(torch_job, a_model_whose_test_outputs_are_nan_finishes_with_a_warning) {
  auto r = start_job("torch-nan-eval", small_torch_job(modules() + "/nan_when_evaluating.pt"));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_NE(
      res.value("reason", "").find("every task done; warning: the trained model's test loss is not a number"),
      std::string::npos)
      << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/result.json").find("\"warning\""), std::string::npos);
}

// A model that fails the worker's start-up check (its logits right on config check's 1024 rows,
// another width on the probe's) ends the job at once naming the error: its workers crash-looped for
// ~40 s ("worker-0 died 11 times in a minute"), relaunched 20 times.
TEST(torch_job, a_model_refused_as_the_workers_start_fails_the_job_at_once) {
  auto r = start_job("torch-refused", small_torch_job(modules() + "/wrong_unless_1024.pt"));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "failed") << res.dump();
  EXPECT_NE(res.value("reason", "").find(": the job's model failed as it started: "), std::string::npos)
      << res.dump();
  EXPECT_NE(res.value("reason", "").find("logits of shape"), std::string::npos) << res.dump();
  EXPECT_EQ(res.value("reason", "").find("E [worker"), std::string::npos)
      << "the log line's prefix: " << res.dump();
  EXPECT_EQ(res.value("node_restarts", -1), 0) << "relaunched into the same failure: " << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

// A job whose evaluation fails after tasks were quarantined names both (the reason named the
// evaluation alone; 10 quarantined tasks showed only in tasks_failed). Gaussian rows: a few tasks,
// and the test set, hold a value beyond the module's threshold.
TEST(torch_job, a_failed_evaluation_names_the_tasks_quarantined_before_it) {
  const auto dir = test_root("torch-quarantined-data");  // start_job clears its own
  {
    std::ofstream csv(dir + "/rows.csv");
    csv << "label,a,b,c,d\n";
    std::mt19937 rng(7);
    std::normal_distribution<double> g(0.0, 1.0);
    for (int i = 0; i < 3000; ++i)
      csv << i % 3 << ',' << g(rng) << ',' << g(rng) << ',' << g(rng) << ',' << g(rng) << '\n';
  }
  std::string out;
  ASSERT_EQ(
      troupe("data import csv " + dir + "/rows.csv --out " + dir + "/store --label label --test-fraction 0.2",
             &out),
      0)
      << out;
  auto r = start_job("torch-quarantined",
                     "strategy = \"allreduce\"\nworkers = 2\nrecords_per_task = 200\n"
                     "[model]\ntype = \"torchscript\"\npath = \"" +
                         modules() +
                         "/fails_over_threshold.pt\"\n[train]\nepochs = 1\n"
                         "batch_size = 32\n[data]\nsource = \"store\"\ntrain = \"" +
                         dir + "/store/train\"\ntest = \"" + dir + "/store/test\"\n");
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 1) << read_file(r.err_file);
  auto res = result(r);
  ASSERT_GT(res.value("tasks_failed", 0), 0) << res.dump();
  const auto reason = res.value("reason", "");
  EXPECT_NE(reason.find("the evaluation of the trained model failed"), std::string::npos) << reason;
  EXPECT_NE(reason.find(std::to_string(res.value("tasks_failed", 0)) + " task(s) were quarantined before it"),
            std::string::npos)
      << reason;
  EXPECT_TRUE(no_processes_of(r));
}

// A module whose logits are float64 trains (they are taken as float32) and its exported model is
// evaluated, predicted and served as it trained: `troupe evaluate` (predict, serve) refused it,
// "forward returns Double [2, 10] ...; model.json promises float logits".
TEST(torch_job, a_model_of_float64_logits_is_evaluated_as_it_trained) {
  job_place place;
  place.dataset_cache = test_root("torch-f64-datasets");
  auto r = start_job("torch-f64", small_torch_job(modules() + "/f64_logits.pt"), place);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto res = result(r);
  std::string test;
  for (const auto& e : fs::directory_iterator(place.dataset_cache))
    if (fs::exists(e.path() / "test/data.mdb")) test = (e.path() / "test").string();
  ASSERT_FALSE(test.empty());
  std::string out;
  ASSERT_EQ(
      troupe("evaluate " + r.job_dir + "/model --data " + test + " --root " + r.dir + " --quiet 2>&1", &out),
      0)
      << out;
  auto j = nlohmann::json::parse(out.substr(out.rfind('{')), nullptr, false);
  EXPECT_NEAR(j.value("accuracy", 0.0), res.value("test_accuracy", 1.0), 1e-9) << out << res.dump();
}

// train --local of the same module fails too, saying so (it wrote a model that predicts nothing and
// ended "ok" with a null loss, exit 0).
TEST(torch_job, train_local_of_a_model_whose_loss_is_nan_fails_saying_it_diverged) {
  const auto dir = test_root("torch-nan-local");
  std::ofstream(dir + "/job.toml") << "[job]\nroot = \"" << dir << "/jobs\"\ndataset_cache = \""
                                   << dataset_cache() << "\"\n"
                                   << small_torch_job(modules() + "/nan_when_training.pt");
  std::string out;
  EXPECT_EQ(troupe("train --local " + dir + "/job.toml 2>&1", &out), 1) << out;
  EXPECT_NE(out.find("training diverged: the loss of epoch 1 is NaN"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir + "/jobs")) << "a model was written";
}

// Issue 44: a start-up race trained a task twice. A worker leases its first task before it joins
// (it warms up on it); when its warm-up outlasted the master's 3 s grace, the master put the task of
// a worker "not a member" back to TODO while that worker trained it, and both reports counted
// (62,000 samples for 60,000 records). Here every worker's first step takes seconds: with no fault,
// every task is leased once (its attempt is 1) and every record is trained once. The lease is 8 s,
// shorter than that warm-up (about 12 s here, 38 s on a loaded machine): the warm-up's leases were
// not renewed, expired, and the first two tasks were trained twice (9,000 samples).
TEST(torch_job, a_slow_first_step_trains_no_record_twice) {
  auto r = start_job("torch-slow-start", "lease_timeout_ms = 8000\n" +
                                             small_torch_job(modules() + "/slow_first_step.pt", "", 500));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  expect_all_done(r);
  auto res = result(r);
  EXPECT_EQ(res.value("samples_trained", 0), res.value("records_done", 1)) << res.dump();
  EXPECT_EQ(res.value("records_done", 0), 8000) << res.dump();  // 2 epochs of 4,000
  EXPECT_EQ(res.value("tasks_requeued", 1), 0) << res.dump();
  for (const auto& [id, attempt] : done_attempts(r)) EXPECT_EQ(attempt, 1u) << "task " << id;
  EXPECT_EQ(read_file(r.job_dir + "/logs/master.log").find("(not a member) back to TODO"), std::string::npos);
}

// Modules that fail only on what training does not show: integer logits, a batch of the
// evaluation's size, a loss of one value per row, nothing to train (the last two failed each task
// after the job started). `troupe run` refuses them before any node starts (exit 2), naming the
// problem, as `troupe config check` does.
TEST(torch_job, modules_with_integer_logits_or_failing_on_the_evaluation_batch_are_refused_first) {
  for (const auto& [module, words] : {std::pair{"int_logits", "logits of dtype Long"},
                                      std::pair{"fails_on_large_batches", "takes at most 512 rows"},
                                      std::pair{"per_row_loss",
                                                "returns a tensor of shape [1024]; training "
                                                "needs one number"},
                                      std::pair{"frozen", "the module has no trainable parameters"}}) {
    const auto toml = small_torch_job(modules() + "/" + module + ".pt");
    auto r = start_job(std::string("torch-refused-") + module, toml);
    EXPECT_EQ(wait_job(r, std::chrono::seconds(120)), 2) << read_file(r.err_file);
    EXPECT_NE(read_file(r.err_file).find(words), std::string::npos) << read_file(r.err_file);
    std::string out;
    EXPECT_EQ(troupe("config check " + r.dir + "/job.toml", &out), 2) << out;
    EXPECT_NE(out.find(words), std::string::npos) << out;
    // Its one line is the error: no info line that the plugin loaded before it.
    EXPECT_EQ(out.find("TorchScript plugin:"), std::string::npos) << out;
  }
}

// Issue 44: `troupe run mlp.toml` in the model's folder (no folder in the job file's path) left the
// module's path relative to the job directory: the workers died until the job gave up. The module is
// found beside the job file, and a worker that dies at start for its own reason is named with it.
TEST(torch_job, troupe_run_of_a_bare_job_file_name_finds_the_module_beside_it) {
  // Beside the job file's folder (start_job makes that folder anew): a path relative to the file.
  const std::string models = test_root("torch-bare-name-models");
  std::filesystem::copy_file(modules() + "/mlp.pt", models + "/mlp.pt");
  auto r = start_job("torch-bare-name", small_torch_job("../torch-bare-name-models/mlp.pt"),
                     {.root = "", .dataset_cache = "", .job_id = "", .from_file_folder = true});
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  expect_all_done(r);
  auto res = result(r);
  EXPECT_GT(res.value("test_accuracy", 0.0), 0.5) << res.dump();
  EXPECT_TRUE(res.contains("train_loss")) << res.dump();  // the final training loss is reported
}

TEST(torch_job, scripted_mlp_under_allreduce_survives_a_worker_kill_and_matches_pytorch) {
  const std::string cache = test_root("torch-mlp-cache");
  const std::string toml = R"(name = "torch-mlp"
strategy = "allreduce"
workers = 2
records_per_task = 2000
[model]
type = "torchscript"
path = ")" + modules() + R"(/mlp.pt"
[train]
epochs = 8
batch_size = 64
optimizer = "adam"
learning_rate = 0.002
[data]
source = "fashion-mnist"
max_test_rows = 5000
)";
  // The kill is to find a standby ready: the first one became a first worker, the next one has
  // loaded the module once it says it waits (about 0.5 s). Two epochs took 5 s before the TorchScript
  // path got faster, then under 2 s: the job ended before any standby was ready, every time (CI).
  // Eight epochs take about 5 s again; on a loaded machine the load can still take longer. That is no kill at
  // all, so the job runs again (its dataset is cached): up to three times, each time saying why.
  job_run r;
  for (int attempt = 1;; ++attempt) {
    r = start_job("torch-mlp", toml, {.root = "", .dataset_cache = cache, .job_id = ""});
    ASSERT_TRUE(poll_until(
        [&] {
          auto log = read_file(r.job_dir + "/logs/standby.log");
          auto first = log.find("waiting for an identity");
          return (first != std::string::npos &&
                  log.find("waiting for an identity", first + 1) != std::string::npos) ||
                 exited(r);
        },
        std::chrono::seconds(120)));
    if (kill_after(r, "worker-1", 4)) break;
    ASSERT_TRUE(exited(r)) << "worker-1 was not found to kill\n" << read_file(r.err_file);
    ASSERT_EQ(*r.exit_code, 0) << read_file(r.err_file);
    ASSERT_LT(attempt, 3) << "the job ended before its standby was ready, three times\n"
                          << read_file(r.err_file);
    std::printf("attempt %d: the job ended (exit %d) before its standby had loaded the module; again\n",
                attempt, *r.exit_code);
  }
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GE(res.value("node_restarts", 0), 1) << res.dump();
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));  // the standby worker included
  // The replacement was a standby that had loaded libtorch and the module before the kill
  // (docs/models.md); so was a first worker, and the kill was no standby's.
  auto log = read_file(r.job_dir + "/logs/worker-1.log");
  EXPECT_NE(log.find("worker-1#1: started from a standby (pid "), std::string::npos) << log;
  EXPECT_NE(log.find("the TorchScript plugin and "), std::string::npos) << log;
  // Each worker names where its module trains (on the GPU: "(cuda:0)", bench/device/torch_gpu.sh).
  EXPECT_NE(log.find("torchscript model on the torchscript backend (cpu), strategy allreduce"),
            std::string::npos)
      << log;
  auto standby = read_file(r.job_dir + "/logs/standby.log");
  EXPECT_NE(standby.find("becomes worker-1#1"), std::string::npos) << standby;
  // Every standby started became a worker or was killed at the job's end.
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = standby.find(what); at != std::string::npos; at = standby.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("start standby#0"),
            count(" becomes worker-") + count("killed by SIGKILL") + count("not wanted any more"))
      << standby;
  // Two ranks of 64 average into one step of 128 samples: the reference steps at 128.
  auto ref = reference(modules() + "/mlp.pt", export_stores(cache, r.dir + "/records"),
                       "--epochs 8 --batch 128 --lr 0.002 --classes 10");
  ASSERT_TRUE(ref.is_object());
  std::printf("troupe %.4f, PyTorch %.4f\n", res.value("test_accuracy", 0.0), ref.value("accuracy", 0.0));
  // 0.015: the kill shifts the schedule (the killed worker's task is trained again, in another order)
  // away from the reference's; CI saw troupe 0.8778 against 0.8678.
  EXPECT_NEAR(res.value("test_accuracy", 0.0), ref.value("accuracy", 1.0), 0.015) << res.dump() << ref.dump();
}

// `troupe train --local` on a scripted module: its JSON line names the backend, the device switch
// it followed and where the module trained; [job] device = "gpu" with Debian's CPU-only libtorch is
// one clear error (the same command on the device machine trains on cuda:0: torch_gpu.sh).
TEST(torch_job, train_local_reports_the_backend_and_where_the_module_trained) {
  const std::string job =
      std::string(TROUPE_SOURCE_DIR) + "/examples/torch/mlp.toml --set model.path=" + modules() +
      "/mlp.pt --set train.epochs=1 --set data.max_train_rows=2000 " + "--set data.max_test_rows=500";
  auto out = run(std::string(TROUPE_BIN) + " train --local " + job + " 2>/dev/null");
  while (!out.empty() && out.back() == '\n') out.pop_back();
  auto j = nlohmann::json::parse(out.substr(out.rfind('\n') + 1), nullptr, false);  // the last line
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j.value("backend", ""), "torchscript") << out;
  EXPECT_EQ(j.value("device", ""), "cpu") << out;
  EXPECT_EQ(j.value("placement", ""), "cpu") << out;
  EXPECT_EQ(j.value("samples_trained", 0), 2000) << out;

  // Either switch: [train] device (train --local's) or [job] device (what the backend follows).
  for (const char* set : {" --set job.device=gpu", " --set train.device=gpu"}) {
    std::string err;
    FILE* p = ::popen((std::string(TROUPE_BIN) + " train --local " + job + set + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p)) err += buf;
    int rc = ::pclose(p);
    EXPECT_NE(rc, 0) << set << ": " << err;
    EXPECT_NE(
        err.find("[job] device = \"gpu\" with model type \"torchscript\": this build's libtorch has no CUDA"),
        std::string::npos)
        << set << ": " << err;
  }
}

// The scripted DeepFM-style model under async_ps, 2 PS shards checkpointing every 300 ms.
std::string ctr_job(const std::string& name) {
  return "name = \"" + name + R"("
strategy = "async_ps"
workers = 2
records_per_task = 2048
[ps]
shards = 2
checkpoint_every_ms = 300
[model]
type = "torchscript"
path = ")" +
         modules() + R"(/deepfm.pt"
embedding_dim = 8
[train]
epochs = 3
batch_size = 128
optimizer = "adam"
learning_rate = 0.005
[data]
source = "synthetic-ctr"
rows = 100000
test_rows = 20000
fields = 6
dense_dim = 4
vocab_per_field = 50
)";
}

bool first_checkpoint(job_run& r) {
  return poll_until(
      [&] {
        return read_file(r.job_dir + "/logs/ps-0.log").find("first checkpoint") != std::string::npos ||
               exited(r);
      },
      std::chrono::seconds(120));
}

TEST(torch_job, scripted_deepfm_under_async_ps_survives_a_ps_kill_and_matches_pytorch) {
  const std::string cache = test_root("torch-ctr-cache");
  auto r = start_job("torch-ctr", ctr_job("torch-ctr"), {.root = "", .dataset_cache = cache, .job_id = ""});
  first_checkpoint(r);
  ASSERT_TRUE(kill_after(r, "ps-0", 2)) << read_file(r.err_file);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GE(res.value("node_restarts", 0), 1) << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/logs/ps-0.log").find("restored checkpoint"), std::string::npos);
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
  auto ref = reference(modules() + "/deepfm.pt", export_stores(cache, r.dir + "/records"),
                       "--epochs 3 --batch 128 --lr 0.005 --classes 2 --embedding-dim 8");
  ASSERT_TRUE(ref.is_object());
  std::printf("troupe AUC %.4f, PyTorch %.4f, planted %.4f\n", res.value("test_auc", 0.0),
              ref.value("auc", 0.0), res.value("true_auc", 0.0));
  EXPECT_NEAR(res.value("test_auc", 0.0), ref.value("auc", 1.0), 0.01) << res.dump() << ref.dump();
}

// The module file rewritten mid-job (model.py exported again, other layers) changes no worker: the
// job trains the copy the runner made as it began (<job dir>/module.pt, named by the job's job.toml).
// Before, the worker relaunched after a kill loaded the new file, its pulls from the shards failed on
// every batch ("waiting for the PS shards") and the task it held was never done: the job never ended.
TEST(torch_job, a_module_file_rewritten_mid_job_changes_no_worker) {
  const std::string mine = test_root("torch-rewritten-module") + "/deepfm.pt";
  fs::copy_file(modules() + "/deepfm.pt", mine);
  auto toml = ctr_job("torch-rewritten");
  toml.replace(toml.find(modules() + "/deepfm.pt"), modules().size() + 10, mine);
  auto r = start_job("torch-rewritten", toml,
                     {.root = "", .dataset_cache = test_root("torch-rewritten-cache"), .job_id = ""});
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 2; },
      std::chrono::seconds(180)))
      << read_file(r.err_file);
  fs::copy_file(modules() + "/ctr_linear.pt", mine, fs::copy_options::overwrite_existing);
  pid_t pid = node_pid(r, "worker-1");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_GE(res.value("node_restarts", 0), 1) << res.dump();
  expect_all_done(r);
  EXPECT_NE(read_file(r.job_dir + "/logs/worker-1.log").find("worker-1#1"), std::string::npos);
  EXPECT_EQ(read_file(r.job_dir + "/module.pt"), read_file(modules() + "/deepfm.pt"));
  EXPECT_NE(read_file(r.job_dir + "/job.toml").find(r.job_dir + "/module.pt"), std::string::npos)
      << read_file(r.job_dir + "/job.toml");
  EXPECT_TRUE(no_processes_of(r));
}

// The runner SIGKILLed mid-job, then `troupe run --resume`: the PS shards restore the scripted
// model's checkpoint, nothing DONE before the kill is trained again, and the job ends as well as
// the planted model allows.
TEST(torch_job, scripted_deepfm_resumes_after_a_runner_sigkill) {
  auto r = start_job("torch-resume", ctr_job("torch-resume"),
                     {.root = "", .dataset_cache = test_root("torch-resume-cache"), .job_id = ""});
  first_checkpoint(r);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 8; },
      std::chrono::seconds(180)))
      << read_file(r.err_file);
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), -SIGKILL);
  ASSERT_TRUE(poll_until([&] { return no_processes_of(r); }, std::chrono::seconds(30)));
  auto before = done_attempts(r);
  ASSERT_GE(before.size(), 8u);
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(400)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "finished") << res.dump();
  EXPECT_TRUE(res.value("resumed", false)) << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/logs/ps-0.log").find("restored checkpoint"), std::string::npos);
  expect_all_done(r);
  auto after = done_attempts(r);
  for (const auto& [id, attempt] : before) EXPECT_EQ(after[id], attempt) << "task " << id;
  // The planted model's AUC bounds what any model reaches; the uninterrupted run of this job
  // (above) is within 0.01 of PyTorch's.
  EXPECT_GT(res.value("test_auc", 0.0), res.value("true_auc", 1.0) - 0.05) << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

// One async_ps worker training the counter of training forwards (a buffer: 16 a task, 128 in the job),
// paced (about 4 s) and writing its buffers every 100 ms with the shards' checkpoints.
std::string counting_async_ps_job() {
  auto job = small_torch_job(modules() + "/counts_training_forwards.pt", "[ps]\ncheckpoint_every_ms = 100\n");
  job.replace(job.find("workers = 2"), 11, "workers = 1\nmax_workers = 1");
  job.replace(job.find("strategy = \"allreduce\""), 22, "strategy = \"async_ps\"");
  job.replace(job.find("[train]\n"), 8, "[train]\nmax_samples_per_s = 2000\n");
  return job;
}

int trained_forwards(const std::string& model_dir) {
  return std::atoi(run("/usr/bin/python3 -c \"import torch; print(int(torch.jit.load('" + model_dir +
                       "/model.pt').calls.item()))\"")
                       .c_str());
}

// The job's runner SIGKILLed once 3 tasks are done, and every node gone with it.
void kill_the_runner_after_3_tasks(job_run& r) {
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 3; },
      std::chrono::seconds(180)))
      << read_file(r.err_file);
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), -SIGKILL);
  ASSERT_TRUE(poll_until([&] { return no_processes_of(r); }, std::chrono::seconds(30)));
}

// An async_ps worker's buffers (batch norm's running statistics; here a counter) outlive it: the
// relaunch of a SIGKILLed worker takes those its predecessor checkpointed. It started from the
// module's own: the job's model counted the forwards of the relaunch alone (at most 96 of 128).
TEST(torch_job, a_relaunched_async_ps_worker_takes_the_buffers_its_predecessor_checkpointed) {
  auto r = start_job("torch-ps-buffers", counting_async_ps_job());
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 2; },
      std::chrono::seconds(180)))
      << read_file(r.err_file);
  pid_t pid = node_pid(r, "worker-0");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  EXPECT_GE(result(r).value("node_restarts", 0), 1) << read_file(r.job_dir + "/result.json");
  const auto log = read_file(r.job_dir + "/logs/worker-0.log");
  EXPECT_NE(log.find("worker-0#1: takes 1 buffers from " + r.job_dir + "/checkpoints/buffers"),
            std::string::npos)
      << log;
  const int calls = trained_forwards(r.job_dir + "/model");
  std::printf("forwards counted by the job's model after a worker's kill: %d of 128\n", calls);
  EXPECT_GE(calls, 112) << "at most one task's forwards lost between a checkpoint and the kill";
}

// The same buffers in a job whose runner was SIGKILLed (no final state): `troupe export` writes them
// with the shards' parameters (it wrote the module's own: a counter of 0, batch norm's mean 0), and
// the resumed job's worker starts from them.
TEST(torch_job, an_interrupted_async_ps_job_exports_and_resumes_with_its_workers_buffers) {
  auto r = start_job("torch-ps-buffers-resume", counting_async_ps_job());
  ASSERT_NO_FATAL_FAILURE(kill_the_runner_after_3_tasks(r));
  std::string out;
  ASSERT_EQ(troupe("export " + r.job_dir + " --out " + r.dir + "/mid 2>&1", &out), 0) << out;
  const int mid = trained_forwards(r.dir + "/mid");
  std::printf("forwards counted by the interrupted job's export: %d\n", mid);
  EXPECT_GE(mid, 32) << out;  // 3 tasks done, less what the last 100 ms lost
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  const int calls = trained_forwards(r.job_dir + "/model");
  std::printf("forwards counted by the resumed job's model: %d of 128\n", calls);
  EXPECT_GE(calls, 112);
}

// A buffers checkpoint that cannot be read (its files overwritten) stops neither the export nor the
// resume: both say so and keep the module's own, as a starting worker does.
TEST(torch_job, a_damaged_buffers_checkpoint_stops_neither_the_export_nor_the_resume) {
  auto r = start_job("torch-ps-buffers-damaged", counting_async_ps_job());
  ASSERT_NO_FATAL_FAILURE(kill_the_runner_after_3_tasks(r));
  std::size_t damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(r.job_dir + "/checkpoints/buffers"))
    if (e.is_regular_file()) {
      std::ofstream(e.path(), std::ios::trunc) << "not a checkpoint";
      ++damaged;
    }
  ASSERT_GT(damaged, 0u);
  std::string out;
  ASSERT_EQ(troupe("export " + r.job_dir + " --out " + r.dir + "/mid 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("checkpoints/buffers: the workers' buffers cannot be read, the module's own are kept"),
            std::string::npos)
      << out;
  EXPECT_EQ(trained_forwards(r.dir + "/mid"), 0);
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  // The resumed run's workers (their names follow the first run's) passed it over too.
  std::string logs;
  for (const auto& e : fs::directory_iterator(r.job_dir + "/logs"))
    if (e.path().filename().string().rfind("worker-", 0) == 0) logs += read_file(e.path().string());
  EXPECT_NE(logs.find("/checkpoints/buffers are not taken, the module's own are"), std::string::npos) << logs;
}

}  // namespace
}  // namespace troupe::testing
