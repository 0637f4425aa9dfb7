// Served records (issue 19, docs/data.md): jobs whose workers read every record from the master
// node's record server ([data] serve = "always") train to the metric of the same job reading the
// local store, every task DONE once, and later epochs come from the workers' caches; a record
// corrupted on the serving side fails only its task (quarantined), never a node.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "job_harness.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json run_ok(const std::string& name, const std::string& toml, const job_place& place = {}) {
  auto r = start_job(name, toml, place);
  int rc = wait_job(r, std::chrono::seconds(300));
  EXPECT_EQ(rc, 0) << read_file(r.err_file);
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
  auto res = result(r);
  res["job_dir"] = r.job_dir;
  return res;
}

// Ranges the workers of a job fetched from the record server and took from their caches (their
// "served records" log lines).
std::pair<std::uint64_t, std::uint64_t> served_ranges(const std::string& job_dir) {
  std::uint64_t fetched = 0, hits = 0;
  static const std::regex line(R"(served records: (\d+) ranges fetched .* (\d+) from the cache)");
  for (const auto& e : fs::directory_iterator(job_dir + "/logs")) {
    if (e.path().filename().string().rfind("worker-", 0) != 0) continue;
    auto text = read_file(e.path().string());
    for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
      fetched += std::stoull((*it)[1]);
      hits += std::stoull((*it)[2]);
    }
  }
  return {fetched, hits};
}

void expect_served(const nlohmann::json& res) {
  EXPECT_EQ(res.value("tasks_requeued", 1), 0) << "every task DONE once: " << res.dump();
  EXPECT_EQ(res.value("node_restarts", -1), 0) << res.dump();
  auto [fetched, hits] = served_ranges(res["job_dir"].get<std::string>());
  EXPECT_GT(fetched, 0u) << "the workers read their records from the record server";
  EXPECT_GT(hits, 0u) << "the second epoch's tasks came (partly) from the workers' caches";
}

const std::string served = "serve = \"always\"\n";

// One worker: the same tasks in the same order, so the metric compares the data alone (two
// workers' runs differ by which worker trains which task, a few points on this small job).
TEST(job_serve, an_mlp_allreduce_job_on_served_records_trains_as_on_local_reads) {
  auto job = mlp_job({.strategy = "allreduce", .workers = 1, .max_train_rows = 6000, .max_test_rows = 1000});
  auto local = run_ok("serve-mlp-local", job);
  auto remote = run_ok("serve-mlp-served", job + served);
  EXPECT_GT(local.value("test_accuracy", 0.0), 0.70) << local.dump();
  EXPECT_NEAR(remote.value("test_accuracy", 0.0), local.value("test_accuracy", 1.0), 0.01) << remote.dump();
  expect_served(remote);
  // No memory cache, a spill file instead: the second epoch comes from it.
  auto spill = test_root("serve-spill");
  auto spilled = run_ok("serve-mlp-spill",
                        job + served + "cache_mb = 0\nspill_mb = 64\nspill_dir = \"" + spill + "\"\n");
  EXPECT_NEAR(spilled.value("test_accuracy", 0.0), local.value("test_accuracy", 1.0), 0.01) << spilled.dump();
  expect_served(spilled);
  auto worker_log = read_file(spilled["job_dir"].get<std::string>() + "/logs/worker-0.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(worker_log, m, std::regex(R"(\((\d+) of them from the spill file\))")));
  EXPECT_EQ(std::stoull(m[1]), 12u) << "the second epoch's 12 tasks";
  auto two =
      run_ok("serve-mlp-two",
             mlp_job({.strategy = "allreduce", .max_train_rows = 6000, .max_test_rows = 1000}) + served);
  EXPECT_GT(two.value("test_accuracy", 0.0), 0.70) << two.dump();
  expect_served(two);
}

// Flips a byte of record `index`'s label in the store's data file, keeping the file's size and
// modification time (so the runner's once-per-file verification does not rebuild the store): the
// corruption is met only when the record is read.
void corrupt_record(const std::string& dir, std::uint64_t index) {
  std::string bytes;
  {
    auto store = storage::record_store::open(dir);
    ASSERT_TRUE(store) << store.err().to_string();
    ASSERT_TRUE(store->scan_raw(index, 1, [&](std::uint64_t, std::string_view v) {
      bytes = v;
      return true;
    }));
  }
  const std::string file = dir + "/data.mdb";
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  auto data = read_file(file);
  auto at = data.find(bytes);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(data.find(bytes, at + 1), std::string::npos) << "the record's bytes are unique in the file";
  char flipped = static_cast<char>(bytes[5] ^ 0x40);
  int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(at + 5)), 1);
  ::close(fd);
  timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
}

TEST(job_serve, deepfm_on_served_records_and_a_record_corrupted_on_the_server_fails_only_its_task) {
  job_place place;
  place.dataset_cache = test_root("serve-datasets");
  auto local = run_ok("serve-ctr-local", ctr_job(1, 20000, 2), place);
  auto remote = run_ok("serve-ctr-served", ctr_job(1, 20000, 2) + served, place);
  EXPECT_GT(local.value("test_auc", 0.0), 0.6) << local.dump();
  EXPECT_NEAR(remote.value("test_auc", 0.0), local.value("test_auc", 1.0), 0.01) << remote.dump();
  expect_served(remote);

  std::string train;
  for (const auto& e : fs::directory_iterator(place.dataset_cache))
    if (fs::exists(e.path() / "train/data.mdb")) train = (e.path() / "train").string();
  ASSERT_FALSE(train.empty());
  corrupt_record(train, 100);
  auto r = start_job("serve-ctr-corrupt", ctr_job(2, 20000, 1) + served, place);
  EXPECT_NE(wait_job(r, std::chrono::seconds(300)), 0) << "a quarantined task fails the job";
  auto res = result(r);
  EXPECT_EQ(res.value("tasks_failed", 0), 1) << res.dump();
  EXPECT_EQ(res.value("tasks_done", 0), 19)
      << "20 tasks of 1024 records (the last one shorter)" << res.dump();
  EXPECT_EQ(res.value("node_restarts", -1), 0) << "no node crashed on the corrupt record: " << res.dump();
  std::string logs;
  for (const auto& e : fs::directory_iterator(r.job_dir + "/logs")) logs += read_file(e.path().string());
  EXPECT_NE(logs.find("served record: record 100: checksum mismatch"), std::string::npos);
  EXPECT_TRUE(no_processes_of(r));
}

// The record server dies with its master (SIGKILL); the runner relaunches the master at the same
// address and the workers ask its new record server for the rest (a fetch on its way is asked
// again): every task DONE, the job ends well.
TEST(job_serve, a_killed_record_server_is_asked_again_once_its_master_is_relaunched) {
  auto r = start_job("serve-master-kill", ctr_job(2, 300000, 2) + served);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["tasks"]["done"].get<std::uint64_t>() >= 10; },
      std::chrono::seconds(120)));
  pid_t pid = node_pid(r, "master");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  expect_all_done(r);
  auto res = result(r);
  EXPECT_EQ(res.value("master_starts", 0), 2) << res.dump();
  EXPECT_GT(served_ranges(r.job_dir).first, 0u);
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
