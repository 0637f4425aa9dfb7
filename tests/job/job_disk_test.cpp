// A job whose directory (or only its PS checkpoints) is on a small tmpfs that fills up mid-job
// (mounting it needs root, skipped otherwise): the job pauses with the fault named in its status, and either
// resumes once space returns and finishes with nothing lost, or fails cleanly after job.disk_full_timeout_ms.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "disk_faults.hpp"
#include "job_harness.hpp"

namespace troupe::testing {
namespace {

using test_util::small_tmpfs;

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s["tasks"]["done"].get<std::uint64_t>();
}

bool no_space_fault(const nlohmann::json& s) {
  return s.contains("fault") &&
         s["fault"].get<std::string>().find("no space left on device") != std::string::npos;
}

// `toml` (a ctr_job) with its PS checkpoints in `dir` ([ps] checkpoint_dir).
std::string with_checkpoint_dir(std::string toml, const std::string& dir) {
  return toml.replace(toml.find("[ps]\n"), 5, "[ps]\ncheckpoint_dir = \"" + dir + "\"\n");
}

job_run start_on(const small_tmpfs& fs, const std::string& name, const std::string& job_extra) {
  job_place place;
  place.root = fs.dir + "/jobs";
  return start_job(name, ctr_job(2, 300000, 3, 300, job_extra), place);
}

TEST(job_disk, a_full_disk_pauses_the_job_and_it_resumes_when_space_returns) {
  small_tmpfs fs(test_root("resume-fs"), "64m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  auto r = start_on(fs, "disk-resume", "");
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2; }, std::chrono::seconds(120)));
  fs.fill();
  auto paused = wait_status(r, no_space_fault, std::chrono::seconds(30));
  ASSERT_TRUE(paused) << read_file(r.err_file);
  EXPECT_NE((*paused)["fault"].get<std::string>().find(fs.dir), std::string::npos) << paused->dump();
  // Lines worker-0 logs now are lost (its log is on the full disk): the fault names that too. The
  // lines: transport delays of 1 us injected by troupe chaos, which the node logs (enough of them
  // to need a new page of the tmpfs: the log's last page may still hold a few).
  std::string faults;
  for (int i = 0; i < 60; ++i)
    faults += " --fault '" + std::to_string(i * 0.02) + " delay worker-0 us=1 hold=1'";
  std::string out;
  EXPECT_EQ(troupe("chaos --job-dir " + r.job_dir + " --settle 0" + faults, &out), 0) << out;
  auto log_fault = wait_status(
      r,
      [](const nlohmann::json& j) {
        return no_space_fault(j) &&
               j["fault"].get<std::string>().find("worker-0: no space left on device: ") != std::string::npos;
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(log_fault) << read_file(r.err_file);
  EXPECT_NE((*log_fault)["fault"].get<std::string>().find("/logs/worker-0.log (log write)"),
            std::string::npos)
      << log_fault->dump();
  fs.free_space();
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return !j.contains("fault"); }, std::chrono::seconds(30)));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0ull), 300000ull * 3) << res.dump();
  EXPECT_GE(res.value("samples_trained", 0ull), 300000ull * 3) << res.dump();
  auto err = read_file(r.err_file);
  EXPECT_EQ(err.find("malformed"), std::string::npos) << err;
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_disk, a_disk_that_stays_full_fails_the_job_cleanly_in_the_configured_time) {
  small_tmpfs fs(test_root("fail-fs"), "64m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  auto r = start_on(fs, "disk-fail", "disk_full_timeout_ms = 3000\n");
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2; }, std::chrono::seconds(120)));
  fs.fill();
  ASSERT_TRUE(wait_status(r, no_space_fault, std::chrono::seconds(30))) << read_file(r.err_file);
  // 3 s of fault, then the runner stops the job: well within a minute.
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("ok", true), false) << res.dump();
  EXPECT_NE(res.value("reason", "").find("no space left on device"), std::string::npos) << res.dump();
  EXPECT_NE(res.value("reason", "").find("job.disk_full_timeout_ms"), std::string::npos) << res.dump();
  // result.json could not be written on the full disk: `troupe status` says why there is none (it
  // read as a runner that died).
  std::string out;
  EXPECT_FALSE(std::filesystem::exists(r.job_dir + "/result.json"));
  ASSERT_EQ(troupe("status --json --job-dir " + r.job_dir + " 2>/dev/null", &out), 0) << out;
  EXPECT_NE(out.find("is full ("), std::string::npos) << out;
  EXPECT_TRUE(no_processes_of(r));
}

// Two jobs naming one [ps] checkpoint_dir keep their own checkpoints (<dir>/<job id>/ps-<i>): the
// second, a new job, restored the first's and trained on from its weights as if from scratch (and
// one of another shape crash-looped its shards on them).
TEST(job_disk, jobs_sharing_a_checkpoint_dir_keep_their_own_checkpoints) {
  const auto dir = test_root("shared-ckpt-dir") + "/ckpt";
  auto a = start_job("shared-ckpt-a", with_checkpoint_dir(ctr_job(1, 20000, 1, 100), dir));
  ASSERT_EQ(wait_job(a, std::chrono::seconds(120)), 0) << read_file(a.err_file);
  EXPECT_TRUE(std::filesystem::exists(dir + "/shared-ckpt-a/ps-0"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/shared-ckpt-a/ps-1"));
  auto b = start_job("shared-ckpt-b", with_checkpoint_dir(ctr_job(1, 20000, 1, 100), dir));
  ASSERT_EQ(wait_job(b, std::chrono::seconds(120)), 0) << read_file(b.err_file);
  for (const std::string shard : {"ps-0", "ps-1"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/shared-ckpt-b/" + shard));
    EXPECT_EQ(read_file(b.job_dir + "/logs/" + shard + ".log").find("restored checkpoint"), std::string::npos)
        << shard << " of a new job restored another job's checkpoint";
  }
  // Exported from its own checkpoints.
  EXPECT_TRUE(std::filesystem::exists(b.job_dir + "/model/model.json"));
  // Its id again once its job directory is gone: its checkpoints would be restored, refused.
  std::filesystem::remove_all(b.job_dir);
  auto again = start_job("shared-ckpt-b", with_checkpoint_dir(ctr_job(1, 20000, 1, 100), dir));
  EXPECT_EQ(wait_job(again, std::chrono::seconds(60)), 2) << read_file(again.err_file);
  EXPECT_NE(read_file(again.err_file).find(dir + "/shared-ckpt-b holds the checkpoints of an earlier job"),
            std::string::npos)
      << read_file(again.err_file);
  EXPECT_FALSE(std::filesystem::exists(again.job_dir)) << "a refused job left its directory";
}

// Only the PS shards' checkpoints on the small disk ([ps] checkpoint_dir): the journal can be written,
// yet the job must not train on with nothing saved. The fault names the shard and its path, no
// task is handed out while it lasts, and the job finishes once space returns.
TEST(job_disk, a_full_checkpoint_disk_pauses_the_job_naming_the_shard) {
  small_tmpfs fs(test_root("ckpt-fs"), "64m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  auto r = start_job("ckpt-full", with_checkpoint_dir(ctr_job(2, 300000, 3, 300), fs.dir + "/ckpt"));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2; }, std::chrono::seconds(120)));
  ASSERT_TRUE(std::filesystem::exists(fs.dir + "/ckpt/ckpt-full/ps-0"))
      << "the shards do not checkpoint there";
  fs.fill();
  auto shard_fault = [](const nlohmann::json& j) {
    return no_space_fault(j) && j["fault"].get<std::string>().rfind("ps-", 0) == 0;
  };
  auto paused = wait_status(r, shard_fault, std::chrono::seconds(30));
  ASSERT_TRUE(paused) << read_file(r.err_file);
  EXPECT_NE((*paused)["fault"].get<std::string>().find(fs.dir + "/ckpt/ckpt-full/ps-"), std::string::npos)
      << paused->dump();
  // Paused: the tasks the workers held are reported and none is leased again, so a whole window
  // of the master's rate (1 s) goes by without a trained sample. Waited for as that event: a
  // dispenser that kept leasing would keep a task DOING or samples flowing until the deadline.
  auto idle = [&](const nlohmann::json& j) {
    return shard_fault(j) && j["tasks"]["doing"].get<std::uint64_t>() == 0 &&
           j["samples_per_sec"].get<double>() == 0.0;
  };
  auto still = wait_status(r, idle, std::chrono::seconds(30));
  ASSERT_TRUE(still) << "tasks were leased or trained while the checkpoints failed; "
                     << read_file(r.err_file);
  fs.free_space();
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return !j.contains("fault"); }, std::chrono::seconds(30)));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0ull), 300000ull * 3) << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/logs/master.log").find("its checkpoint files are writable again"),
            std::string::npos);
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

// Every task over (the job at its end), the runner still running and a disk fault named: paused.
bool paused_at_the_end(const nlohmann::json& j) {
  return no_space_fault(j) && j.contains("tasks") && j["tasks"]["todo"].get<std::uint64_t>() == 0 &&
         j["tasks"]["doing"].get<std::uint64_t>() == 0 && !j.value("finished", false);
}

// Holds for `seconds` that the job stays paused at its end (the runner neither ended it "ok" nor
// failed it), then returns the last status.
nlohmann::json stays_paused(job_run& r, int seconds) {
  nlohmann::json last;
  for (int i = 0; i < seconds * 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    auto s = status(r);
    if (!s) continue;
    last = *s;
    EXPECT_TRUE(paused_at_the_end(last)) << last.dump();
    if (!paused_at_the_end(last)) break;
  }
  return last;
}

// The PS shards' checkpoints on a disk that fills up while they write none (checkpoint_every_ms: an
// hour): the job's trained rows live only in the shards' memory. The job's end waits for every
// shard's final checkpoint, pausing while the disk is full (it used to end "finished, ok" and the
// shards' last checkpoint on stop failed: the rows were lost), and finishes once space returns.
TEST(job_disk, the_end_of_a_job_waits_for_the_shards_final_checkpoints_through_a_full_disk) {
  small_tmpfs fs(test_root("final-ckpt-fs"), "64m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  auto r =
      start_job("final-ckpt-full", with_checkpoint_dir(ctr_job(2, 100000, 1, 3600000), fs.dir + "/ckpt"));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)));
  fs.fill();
  auto paused = wait_status(r, paused_at_the_end, std::chrono::seconds(120));
  ASSERT_TRUE(paused) << read_file(r.err_file);
  EXPECT_NE((*paused)["fault"].get<std::string>().find(fs.dir + "/ckpt/final-ckpt-full/ps-"),
            std::string::npos)
      << paused->dump();
  stays_paused(r, 3);
  fs.free_space();
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_TRUE(res.value("ok", false)) << res.dump();
  EXPECT_TRUE(res.contains("test_auc")) << res.dump();
  const auto master = read_file(r.job_dir + "/logs/master.log");
  for (const std::string shard : {"ps-0", "ps-1"}) {
    EXPECT_NE(master.find(shard + "#"), std::string::npos);
    EXPECT_NE(read_file(r.job_dir + "/logs/" + shard + ".log").find("final checkpoint: version "),
              std::string::npos)
        << shard;
  }
  EXPECT_NE(master.find(": final checkpoint "), std::string::npos) << master;
  EXPECT_TRUE(no_processes_of(r));
}

// The evaluating worker's final state (checkpoints/final) on a full disk: the job's end pauses (it
// failed the job after max_task_failures quick tries) and finishes once the state can be written.
TEST(job_disk, a_final_state_on_a_full_disk_pauses_the_end_until_it_is_written) {
  auto r = start_job("final-state-full", ctr_job(2, 100000, 1));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j.contains("tasks"); }, std::chrono::seconds(120)));
  std::filesystem::create_directories(r.job_dir + "/checkpoints/final");
  small_tmpfs fs(r.job_dir + "/checkpoints/final", "1m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  fs.fill();
  auto paused = wait_status(r, paused_at_the_end, std::chrono::seconds(120));
  ASSERT_TRUE(paused) << read_file(r.err_file);
  EXPECT_NE((*paused)["fault"].get<std::string>().find("checkpoints/final"), std::string::npos)
      << paused->dump();
  stays_paused(r, 3);
  fs.free_space();
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  EXPECT_TRUE(result(r).value("ok", false)) << result(r).dump();
  EXPECT_TRUE(std::filesystem::exists(r.job_dir + "/checkpoints/final/data.mdb"));
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
