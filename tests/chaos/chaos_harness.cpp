#include "chaos_harness.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "troupe/storage/checkpoint_store.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {

namespace fs = std::filesystem;

chaos_run run_under_chaos(const std::string& name, const std::string& toml, const std::string& chaos_args) {
  chaos_run c;
  std::string dir = test_root(name);
  std::string file = dir + "/job.toml", report = dir + "/report.json";
  std::ofstream(file) << "[job]\nroot = \"" << dir << "/jobs\"\ndataset_cache = \"" << dataset_cache()
                      << "\"\n"
                      << toml;
  c.job_dir = dir + "/jobs/" + name;
  c.exit_code = troupe("chaos --job " + file + " --job-id " + name + " --report " + report + " " + chaos_args,
                       &c.output);
  auto j = nlohmann::json::parse(read_file(report), nullptr, false);
  c.report = j.is_discarded() ? nlohmann::json::object() : j;
  return c;
}

namespace {

void expect_journal_done(const std::string& job_dir) {
  auto j = storage::task_journal::open(job_dir + "/journal");
  ASSERT_TRUE(j) << j.err().to_string();
  auto c = j->counts();
  ASSERT_TRUE(c);
  auto done = j->list(storage::task_state::done);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->size(), c->total()) << "tasks not DONE: todo " << c->todo << " doing " << c->doing;
  std::size_t requeues = 0, max_attempt = 0;
  for (const auto& t : *done) {
    requeues += t.attempt - 1;
    max_attempt = std::max<std::size_t>(max_attempt, t.attempt);
  }
  std::printf("journal: %zu tasks DONE, %zu re-queues (attempt-1 summed), max attempt %zu\n", done->size(),
              requeues, max_attempt);
}

void expect_checkpoints(const std::string& job_dir) {
  std::string root = job_dir + "/checkpoints";
  if (!fs::exists(root)) return;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory() || e.path().filename().string().rfind("ps-", 0) != 0) continue;
    auto store = storage::checkpoint_store::open(e.path().string());
    ASSERT_TRUE(store) << e.path() << ": " << store.err().to_string();
    auto latest = store->load_latest();
    EXPECT_TRUE(latest) << e.path() << ": " << latest.err().to_string();
  }
}

}  // namespace

void expect_invariants(const chaos_run& c, const nlohmann::json& clean_result, const std::string& metric,
                       double tolerance) {
  EXPECT_EQ(c.exit_code, 0) << c.output << read_file(c.job_dir + "/../../stderr");
  std::printf("%s", c.output.c_str());
  expect_journal_done(c.job_dir);
  expect_checkpoints(c.job_dir);
  auto res = nlohmann::json::parse(read_file(c.job_dir + "/result.json"), nullptr, false);
  ASSERT_FALSE(res.is_discarded()) << "no result.json in " << c.job_dir;
  EXPECT_NEAR(res.value(metric, -1.0), clean_result.value(metric, 1e9), tolerance)
      << "chaos: " << res.dump() << "\nclean: " << clean_result.dump();
  job_run r;
  r.job_dir = c.job_dir;
  EXPECT_TRUE(no_processes_of(r)) << "orphan processes of " << c.job_dir;
}

std::size_t faults_injected(const nlohmann::json& report, const std::string& kind) {
  std::size_t n = 0;
  if (!report.contains("faults")) return 0;
  for (const auto& f : report["faults"])
    if (f.value("pid", 0) > 0 && f.value("note", std::string()).empty() &&
        (kind.empty() || f["kind"] == kind))
      ++n;
  return n;
}

}  // namespace troupe::testing
