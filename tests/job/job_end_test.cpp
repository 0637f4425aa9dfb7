// How jobs end besides finishing: the README's exit codes for SIGINT and SIGTERM (during setup too),
// with a final JSON line saying why; stops that end every node by itself, again and again; a
// finished job's timeline without deaths; a corrupt cached dataset, rebuilt before any worker reads
// it; and nodes whose host command fails, named with what to check.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "disk_faults.hpp"
#include "job_harness.hpp"
#include "troupe/cluster/addresses.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::testing {
namespace {

namespace fs = std::filesystem;

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s["tasks"]["done"].get<std::uint64_t>();
}

// Starts a long job, signals the runner once tasks are done, and checks the exit code and final JSON.
void expect_signal_ends_with(int sig, int code, const std::string& name) {
  auto r = start_job(name, ctr_job(2, 600000, 3));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)));
  ASSERT_EQ(::kill(r.pid, sig), 0);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), code) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("ok", true), false) << res.dump();
  EXPECT_EQ(res.value("exit_code", 0), code) << res.dump();
  EXPECT_NE(res.value("reason", "")
                .find(sig == SIGTERM  ? "SIGTERM"
                      : sig == SIGHUP ? "SIGHUP"
                                      : "SIGINT"),
            std::string::npos)
      << res.dump();
  EXPECT_TRUE(no_processes_of(r));
}

// The job's final state cannot be written (here checkpoints/final is a file; a full disk does the
// same): the evaluation that scored it is no result, so the job fails naming why, and it is
// resumed (it ended "finished", ok, with no model to export, and refused --resume).
TEST(job_end, a_final_state_that_cannot_be_written_fails_the_job_and_it_resumes) {
  auto r = start_job("final-unwritable", ctr_job(2, 20000, 1));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j.contains("tasks"); }, std::chrono::seconds(120)));
  fs::create_directories(r.job_dir + "/checkpoints");
  std::ofstream(r.job_dir + "/checkpoints/final") << "in the way\n";
  EXPECT_EQ(wait_job(r, std::chrono::seconds(240)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("ok", true), false) << res.dump();
  EXPECT_NE(res.dump().find("final state could not be written"), std::string::npos) << res.dump();
  fs::remove(r.job_dir + "/checkpoints/final");
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("status", ""), "finished");
  EXPECT_TRUE(fs::is_directory(r.job_dir + "/checkpoints/final"));
}

// A job whose dataset another process is preparing (another job's import: the lock of its cache
// entry held) says so and waits, then trains on the dataset once it is free (the runner printed
// nothing for as long as the other import took).
TEST(job_end, a_job_waiting_for_another_preparer_of_its_dataset_says_so) {
  job_place place;
  place.dataset_cache = test_root("wait-cache");
  auto first = start_job("wait-first", ctr_job(1, 20000, 1), place);
  ASSERT_EQ(wait_job(first, std::chrono::seconds(240)), 0) << read_file(first.err_file);
  std::string entry;
  for (const auto& e : fs::directory_iterator(place.dataset_cache)) entry = e.path().string();
  ASSERT_TRUE(fs::exists(entry + "/lock")) << entry;
  const pid_t holder = ::fork();  // another preparer
  if (holder == 0) {
    const int fd = ::open((entry + "/lock").c_str(), O_RDWR);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    ::sleep(60);
    ::_exit(0);
  }
  ASSERT_TRUE(poll_until(
      [&] {
        const int fd = ::open((entry + "/lock").c_str(), O_RDWR);
        const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
        ::close(fd);
        return held;
      },
      std::chrono::seconds(10)));
  auto second = start_job("wait-second", ctr_job(1, 20000, 1), place);
  EXPECT_TRUE(poll_until(
      [&] {
        return read_file(second.err_file).find("is being prepared by another process") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << read_file(second.err_file);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ASSERT_EQ(wait_job(second, std::chrono::seconds(240)), 0) << read_file(second.err_file);
  EXPECT_NE(read_file(second.err_file).find("the other preparer is done"), std::string::npos);
}

// Stops job `r` (exit 3), then edits its job.toml: `from` becomes `to`. Returns the text before the
// edit (to put back), empty when `from` is not in it.
std::string stop_and_edit(job_run& r, const std::string& from, const std::string& to) {
  std::string out;
  if (troupe("stop --job-dir " + r.job_dir, &out) != 0 || wait_job(r, std::chrono::seconds(60)) != 3) {
    ADD_FAILURE() << "the job did not stop: " << out;
    return "";
  }
  const std::string toml = read_file(r.job_dir + "/job.toml");
  auto at = toml.find(from);
  if (at == std::string::npos) return "";
  std::ofstream(r.job_dir + "/job.toml") << std::string(toml).replace(at, from.size(), to);
  return toml;
}

// job.toml edited between a stop and --resume so that the task journal no longer fits it: refused
// before any node starts, naming the key (the master died 11 times over the journal, and the job
// failed naming a supervisor's giving up); put back, the job resumes.
TEST(job_end, a_resume_whose_job_file_no_longer_fits_its_journal_is_refused_naming_the_key) {
  auto r = start_job("journal-mismatch", ctr_job(2, 200000, 2));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2; }, std::chrono::seconds(120)));
  const std::string toml = stop_and_edit(r, "epochs = 2", "epochs = 5");
  ASSERT_FALSE(toml.empty());
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 2);
  EXPECT_NE(read_file(r.err_file)
                .find("no longer matches the job's task journal: train.epochs is 5, the journal "
                      "was made for 2"),
            std::string::npos)
      << read_file(r.err_file);
  EXPECT_NE(result(r).value("reason", "").find("train.epochs is 5"), std::string::npos)
      << "the final line says why (it said 'setup failed (see logs/runner.log)'): " << result(r).dump();
  EXPECT_EQ(read_file(r.job_dir + "/logs/master.log").find("journal was created with other options"),
            std::string::npos)
      << "no master started";
  // The refused resume ran nothing: the job's record is still the stop's (it read "failed", its
  // counts gone), and its timeline has one end.
  auto record = nlohmann::json::parse(read_file(r.job_dir + "/result.json"), nullptr, false);
  EXPECT_EQ(record.value("status", ""), "stopped") << record.dump();
  EXPECT_GT(record.value("tasks_done", 0), 0) << record.dump();
  std::string out;
  EXPECT_EQ(troupe("status --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_NE(out.find("stopped"), std::string::npos) << out;
  const auto events = read_file(r.job_dir + "/events.jsonl");
  std::size_t ends = 0;
  for (auto at = events.find("\"job_end\""); at != std::string::npos; at = events.find("\"job_end\"", at + 1))
    ++ends;
  EXPECT_EQ(ends, 1u) << events;
  std::ofstream(r.job_dir + "/job.toml") << toml;
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
}

// job.toml's [model] edited between a stop and --resume: the job's checkpoints no longer fit the
// model, and the resume is refused naming it (the restore skipped what did not fit, and the job
// trained on from initial values and finished "ok").
TEST(job_end, a_resume_whose_model_no_longer_fits_its_checkpoints_is_refused_naming_it) {
  auto r = start_job("model-mismatch", ctr_job(2, 200000, 2, 100));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 3; }, std::chrono::seconds(120)));
  const std::string toml = stop_and_edit(r, "embedding_dim = 8", "embedding_dim = 16");
  ASSERT_FALSE(toml.empty());
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 2) << read_file(r.err_file);
  EXPECT_NE(
      read_file(r.err_file).find("does not fit the model its job.toml builds now: nn: bad shape: tensor"),
      std::string::npos)
      << read_file(r.err_file);
  // ps.shards changed: each shard's checkpoint holds another share of the tensors; the shard refuses
  // it and the job fails naming it (ps-1 started from initial values, ps-0 skipped what was not its).
  auto at = toml.find("shards = 2");
  ASSERT_NE(at, std::string::npos) << toml;
  std::ofstream(r.job_dir + "/job.toml") << std::string(toml).replace(at, 10, "shards = 3");
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(180)), 1) << read_file(r.err_file);
  auto reason = result(r).value("reason", "");
  EXPECT_NE(reason.find("does not fit this job's model"), std::string::npos) << reason;
}

// A stopped job whose task journal or checkpoint was damaged since (a disk fault, a truncated
// copy): troupe status says the journal cannot be read (it showed 0 todo, 0 done), and --resume
// fails at once naming the file (its master, or the shard, died 11 times over it: ~40 s).
TEST(job_end, a_resume_of_a_job_whose_journal_or_checkpoint_is_damaged_fails_at_once_naming_it) {
  auto r = start_job("damaged", ctr_job(2, 200000, 2, 100));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 3; }, std::chrono::seconds(120)));
  std::string out;
  ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
  ASSERT_EQ(wait_job(r, std::chrono::seconds(60)), 3) << read_file(r.err_file);
  // An ended job's worker target is what a --resume restores (it read "workers 0/0").
  ASSERT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out, nullptr, false).value("workers_target", 0), 2) << out;
  const auto journal = r.job_dir + "/journal/data.mdb";
  fs::copy_file(journal, journal + ".kept");
  fs::resize_file(journal, 8192);
  ASSERT_EQ(troupe("status --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_NE(out.find("the task journal cannot be read (the counts below are not the job's)"),
            std::string::npos)
      << out;
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), 1) << read_file(r.err_file);
  EXPECT_NE(read_file(r.err_file).find(": the task journal cannot be read: "), std::string::npos)
      << read_file(r.err_file);
  fs::rename(journal + ".kept", journal);
  // The shards' latest checkpoint cut short.
  int cut = 0;
  for (const auto& shard : fs::directory_iterator(r.job_dir + "/checkpoints"))
    for (const auto& f : fs::directory_iterator(shard.path()))
      if (f.path().extension() == ".ckpt") {
        fs::resize_file(f.path(), fs::file_size(f.path()) / 2);
        ++cut;
      }
  ASSERT_GT(cut, 0) << "no checkpoint written";
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), 1) << read_file(r.err_file);
  EXPECT_NE(read_file(r.err_file).find(": the job's state cannot be read: "), std::string::npos)
      << read_file(r.err_file);
  EXPECT_LT(result(r).value("wall_seconds", 1e9), 20.0) << "at once, not after 11 deaths";
  // nodes.json garbled: status says so (it listed no node and said nothing).
  std::ofstream(r.job_dir + "/nodes.json") << "garbage";
  ASSERT_EQ(troupe("status --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_NE(out.find("nodes.json cannot be read (no node is listed): "), std::string::npos) << out;
}

// The same for a ring job: its replicas' checkpoint no longer fits, and the resume is refused naming
// it (the replicas started from initial weights, the DONE tasks not trained again: "ok" on a model
// that had lost them).
TEST(job_end, a_resumed_ring_job_whose_model_no_longer_fits_its_checkpoint_is_refused) {
  mlp_options o;
  o.max_train_rows = 20000;
  o.epochs = 3;
  auto r = start_job("ring-mismatch", "checkpoint_every_ms = 200\n" + mlp_job(o));
  ASSERT_TRUE(poll_until([&] { return fs::exists(r.job_dir + "/checkpoints/ring/state.json"); },
                         std::chrono::seconds(120)));
  const std::string toml = stop_and_edit(r, "hidden = [ 64 ]", "hidden = [ 32 ]");
  ASSERT_FALSE(toml.empty());
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 2) << read_file(r.err_file);
  EXPECT_NE(read_file(r.err_file).find("does not fit the model its job.toml builds now: "), std::string::npos)
      << read_file(r.err_file);
  std::ofstream(r.job_dir + "/job.toml") << toml;  // put back: it resumes
  resume_job(r);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(240)), 0) << read_file(r.err_file);
}

// status and stop while the runner prepares its data (4 s of synthetic rows, in a cache of its own),
// before it wrote nodes.json: status says the job is starting, stop ends it there (both said
// "missing file: nodes.json", and stop worked only once the nodes had started).
TEST(job_end, a_job_preparing_its_data_is_starting_for_status_and_stops_at_once) {
  job_place place;
  place.dataset_cache = test_root("preparing-cache");
  auto r = start_job(
      "preparing",
      "strategy = \"async_ps\"\nworkers = 1\nsync_every = 4\n[model]\ntype = \"deepfm\"\n[data]\nsource = "
      "\"synthetic-ctr\"\nrows = 4000000\nfields = 2\ndense_dim = 1\nvocab_per_field = 50\n",
      place);
  ASSERT_TRUE(poll_until(
      [&] {
        return read_file(r.job_dir + "/logs/runner.log").find("preparing dataset") != std::string::npos;
      },
      std::chrono::seconds(60)));
  // A note on the job file (a key async_ps does not read) is in runner.log too (it went to stderr
  // alone: said before the log file was opened).
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log").find("job.sync_every: read by strategies"),
            std::string::npos);
  std::string out;
  EXPECT_EQ(troupe("status --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_NE(out.find("job preparing  starting (runner pid " + std::to_string(r.pid) +
                     "): its runner prepares the data"),
            std::string::npos)
      << out;
  // --json: a state to poll, as a queued job's (it printed no JSON and exited 1).
  EXPECT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  auto st = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(st.is_object()) << out;
  EXPECT_EQ(st.value("state", ""), "starting") << out;
  EXPECT_EQ(st.value("runner_pid", 0), r.pid) << out;
  EXPECT_FALSE(st.value("finished", true)) << out;
  // scale still says it cannot reach a job that has no nodes yet (exit 1, naming why).
  EXPECT_EQ(troupe("scale --workers 2 --job-dir " + r.job_dir, &out), 1) << out;
  EXPECT_NE(out.find("is starting: its runner (pid " + std::to_string(r.pid) + ") prepares the data"),
            std::string::npos)
      << out;
  // --resume of it while its runner lives: refused first thing, naming the runner (a warning that
  // its /metrics port was taken, by itself, came first, and the refusal read "cluster: already exists").
  EXPECT_EQ(troupe("run --resume " + r.job_dir, &out), 1) << out;
  EXPECT_EQ(out, "troupe: error: job preparing is running: its runner (pid " + std::to_string(r.pid) +
                     ") holds " + r.job_dir + "/runner.lock (stop it first: troupe stop --job-dir " +
                     r.job_dir + ")\n");
  ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), 3) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "stopped") << res.dump();
  EXPECT_NE(res.value("reason", "").find("troupe stop, while the job was preparing the data"),
            std::string::npos)
      << res.dump();
  EXPECT_FALSE(fs::exists(r.job_dir + "/nodes.json"));
  // Chaos against the ended job: refused naming its end (every fault read "job over before the
  // fault was due", exit 0).
  EXPECT_EQ(troupe("chaos --job-dir " + r.job_dir + " --fault '1 kill worker'", &out), 1) << out;
  EXPECT_NE(out.find("job preparing is not running: it ended (stopped, " + r.job_dir +
                     "/result.json) before the chaos began"),
            std::string::npos)
      << out;
}

// The job directory removed while the job runs: the job ends at once naming it (it paused on its
// counters' file, then failed a minute later relaunching a master whose log had no directory).
TEST(job_end, a_job_whose_directory_is_removed_ends_naming_it) {
  auto r = start_job("dir-removed", ctr_job(2, 600000, 3));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)));
  // The job writes on while it is removed (a log line, a checkpoint): remove again what was
  // written meanwhile, as a person repeating `rm -rf` would (one pass failed "Directory not empty").
  ASSERT_TRUE(poll_until(
      [&] {
        std::error_code ec;
        fs::remove_all(r.job_dir, ec);
        return !fs::exists(r.job_dir);
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(wait_job(r, std::chrono::seconds(30)), 1) << read_file(r.err_file);
  EXPECT_NE(read_file(r.err_file).find("the job directory " + r.job_dir + " was removed while the job ran"),
            std::string::npos)
      << read_file(r.err_file);
  EXPECT_TRUE(no_processes_of(r));
}

// SIGHUP: the terminal the runner ran in closed (it died of the default action, with no result.json).
TEST(job_end, sigterm_exits_143_sigint_130_and_sighup_129) {
  expect_signal_ends_with(SIGTERM, 143, "sigterm");
  expect_signal_ends_with(SIGINT, 130, "sigint");
  expect_signal_ends_with(SIGHUP, 129, "sighup");
}

// The kinds of the events in a job's timeline, one per line of events.jsonl.
std::vector<std::string> event_kinds(const std::string& job_dir, const std::string& kind) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(job_dir + "/events.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == kind) lines.push_back(line);
  }
  return lines;
}

// A dataset import has begun in `cache` (prepare_datasets takes the entry's lock first).
bool preparing(const std::string& cache) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache, ec))
    if (fs::exists(e.path() / "lock")) return true;
  return false;
}

// A signal while the runner prepares the job's data (a fresh import of 2M rows: seconds) ends the
// job as one later does: the final line, result.json, the timeline, 128 + the signal.
void expect_setup_signal_ends_with(int sig, int code, const std::string& name) {
  job_place place;
  place.dataset_cache = test_root(name + "-datasets");
  auto r = start_job(name, ctr_job(2, 2000000, 1), place);
  ASSERT_TRUE(
      poll_until([&] { return preparing(place.dataset_cache) || exited(r); }, std::chrono::seconds(60)));
  ASSERT_FALSE(exited(r)) << read_file(r.err_file);
  ASSERT_EQ(::kill(r.pid, sig), 0);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(30)), code) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("ok", true), false) << res.dump();
  EXPECT_EQ(res.value("status", ""), "interrupted") << res.dump();
  EXPECT_EQ(res.value("exit_code", 0), code) << res.dump();
  const auto reason = res.value("reason", "");
  EXPECT_NE(reason.find(sig == SIGTERM ? "SIGTERM" : "SIGINT"), std::string::npos) << reason;
  EXPECT_NE(reason.find("preparing the data"), std::string::npos) << reason;
  auto file = nlohmann::json::parse(read_file(r.job_dir + "/result.json"), nullptr, false);
  ASSERT_TRUE(file.is_object()) << "no result.json";
  EXPECT_EQ(file.value("status", ""), "interrupted") << file.dump();
  EXPECT_EQ(event_kinds(r.job_dir, "job_end").size(), 1u) << read_file(r.job_dir + "/events.jsonl");
  std::string out;
  ASSERT_EQ(troupe("status --json --job-dir " + r.job_dir + " 2>/dev/null", &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out, nullptr, false).value("state", ""), "interrupted") << out;
  EXPECT_TRUE(no_processes_of(r));
}

TEST(job_end, a_signal_while_the_data_is_prepared_ends_the_job_with_its_story) {
  expect_setup_signal_ends_with(SIGTERM, 143, "setup-sigterm");
  expect_setup_signal_ends_with(SIGINT, 130, "setup-sigint");
}

// Workers leave a finished job on the runner's SIGTERM and exit 0: that is no death.
TEST(job_end, a_finished_job_s_timeline_has_no_death) {
  auto r = start_job("no-death", ctr_job(2, 20000, 1));
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("node_restarts", -1), 0);
  auto died = event_kinds(r.job_dir, "died");
  EXPECT_TRUE(died.empty()) << died.front();
}

// The logs of r's job in which a node's supervisor gave up waiting for an actor to stop.
std::vector<std::string> logs_with_a_stuck_actor(const job_run& r) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(r.job_dir + "/logs"))
    if (read_file(e.path().string()).find("did not stop within") != std::string::npos)
      names.push_back(e.path().filename().string());
  return names;
}

// `troupe stop`, SIGTERM and SIGINT while an async_ps job trains, ten times: every node stops by
// itself at once. A worker used to wait out its rpc timeout (10 s) in a PS pull or push to a shard
// that had already exited; its supervisor gave up after 3 s and the runner SIGKILLed the process
// after 5 s ("worker-1 did not stop within 3000 ms", the job's stop taking 5.2 s). A stop takes
// about 0.3 s here; 2.5 s leaves room for a loaded machine and none for the 3 s grace.
TEST(job_end, stopping_an_async_ps_job_stops_every_node_by_itself_every_time) {
  const int rounds = 10;
  for (int i = 0; i < rounds; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    const int sig = i % 3 == 1 ? SIGTERM : i % 3 == 2 ? SIGINT : 0;  // 0: troupe stop
    auto r = start_job("stop-round-" + std::to_string(i), ctr_job(2, 600000, 3));
    ASSERT_TRUE(wait_status(
        r, [](const nlohmann::json& j) { return done_tasks(j) >= 2 && j.value("samples_per_sec", 0.0) > 0; },
        std::chrono::seconds(120)))
        << read_file(r.err_file);
    const auto t0 = std::chrono::steady_clock::now();
    if (sig == 0) {
      std::string out;
      EXPECT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
    } else {
      ASSERT_EQ(::kill(r.pid, sig), 0);
    }
    const int code = wait_job(r, std::chrono::seconds(30));
    const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(code, sig == 0 ? 3 : 128 + sig) << read_file(r.err_file);
    EXPECT_LT(took, 2.5) << "the stop took " << took << " s";
    auto stuck = logs_with_a_stuck_actor(r);
    EXPECT_TRUE(stuck.empty()) << "did not stop within, in " << stuck.front();
    auto died = event_kinds(r.job_dir, "died");
    EXPECT_TRUE(died.empty()) << died.front();
    auto res = result(r);
    EXPECT_EQ(res.value("status", ""), sig == 0 ? "stopped" : "interrupted") << res.dump();
    EXPECT_EQ(res, nlohmann::json::parse(read_file(r.job_dir + "/result.json"), nullptr, false));
    EXPECT_TRUE(no_processes_of(r));
    // The timeline's last figures are result.json's (it ended at the master's last periodic event,
    // short of them).
    const auto metrics = event_kinds(r.job_dir, "metrics");
    ASSERT_FALSE(metrics.empty());
    const auto last = nlohmann::json::parse(metrics.back());
    EXPECT_EQ(last.value("samples", 0ull), res.value("samples_trained", 1ull)) << metrics.back();
    EXPECT_EQ(last.value("tasks_done", 0ull), res.value("tasks_done", 1ull)) << metrics.back();
    // Never below the DONE tasks' records (1024 each, but an epoch's last, one of 3 epochs): the
    // workers' last progress windows were lost at the stop (399,456 for 447,600).
    EXPECT_GE(res.value("samples_trained", 0ull) + 3 * 1024, res.value("tasks_done", 0ull) * 1024)
        << res.dump();
  }
}

TEST(job_end, a_corrupt_cached_dataset_is_rebuilt_before_workers_use_it) {
  job_place place;
  place.dataset_cache = test_root("corrupt-cache-datasets");
  const auto job = ctr_job(2, 20000, 1);
  auto first = start_job("corrupt-cache-1", job, place);
  ASSERT_EQ(wait_job(first, std::chrono::seconds(120)), 0) << read_file(first.err_file);
  std::string train;
  for (const auto& e : fs::directory_iterator(place.dataset_cache))
    if (fs::exists(e.path() / "train/data.mdb")) train = (e.path() / "train").string();
  ASSERT_FALSE(train.empty());
  test_util::corrupt_middle_pages(train);
  auto second = start_job("corrupt-cache-2", job, place);
  ASSERT_EQ(wait_job(second, std::chrono::seconds(120)), 0) << read_file(second.err_file);
  auto err = read_file(second.err_file);
  EXPECT_NE(err.find(train + "/data.mdb"), std::string::npos) << err;
  EXPECT_NE(err.find("rebuilding it"), std::string::npos) << err;
  auto res = result(second);
  EXPECT_EQ(res.value("node_restarts", -1), 0) << "no worker crashed on the bad pages: " << res.dump();
  EXPECT_GT(res.value("test_auc", 0.0), 0.6) << res.dump();
  expect_all_done(second);
}

// A CTR job of 40,000 rows slowed to 8,000 samples/s: running long enough to act on mid-job.
std::string throttled_ctr_job(int workers, int epochs) {
  auto job = ctr_job(workers, 40000, epochs);
  job.replace(job.find("learning_rate = 0.01\n"), 21, "learning_rate = 0.01\nmax_samples_per_s = 8000\n");
  return job;
}

// `troupe data cache prune` never removes the entry a running job reads (deleting it mid-job failed
// the job at its evaluation); once the job is over, it goes.
TEST(job_end, the_dataset_cache_entry_of_a_running_job_is_never_pruned) {
  job_place place;
  place.dataset_cache = test_root("pruned-cache-datasets");
  auto r = start_job("pruned-cache", throttled_ctr_job(1, 3), place);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)))
      << read_file(r.err_file);
  std::string out;
  ASSERT_EQ(troupe("data cache prune --cache " + place.dataset_cache, &out), 0) << out;
  EXPECT_NE(out.find("kept (a job uses it)"), std::string::npos) << out;
  EXPECT_NE(out.find("removed 0 entries"), std::string::npos) << out;
  ASSERT_EQ(troupe("data cache --cache " + place.dataset_cache, &out), 0) << out;
  EXPECT_NE(out.find("(in use)"), std::string::npos) << out;
  ASSERT_EQ(wait_job(r, std::chrono::seconds(180)), 0) << read_file(r.err_file);
  EXPECT_TRUE(result(r).value("ok", false)) << result(r).dump();
  ASSERT_EQ(troupe("data cache prune --cache " + place.dataset_cache, &out), 0) << out;
  EXPECT_NE(out.find("removed 1 entry"), std::string::npos) << out;
}

// The cache's store is damaged after the runner verified it, while workers read it: no worker
// crashes in LMDB (they used to SIGABRT in a loop until "worker-0 died 11 times"); the tasks whose
// records sit on the damaged pages fail, are quarantined, and the job's reason names the file; once
// the cache is whole again, `--resume` finishes it.
TEST(job_end, a_cached_dataset_damaged_while_the_job_runs_fails_its_tasks_naming_the_store) {
  job_place place;
  place.dataset_cache = test_root("damaged-cache-datasets");
  auto r = start_job("damaged-cache", throttled_ctr_job(2, 2), place);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1; }, std::chrono::seconds(120)));
  std::string train;
  for (const auto& e : fs::directory_iterator(place.dataset_cache))
    if (fs::exists(e.path() / "train/data.mdb")) train = (e.path() / "train").string();
  ASSERT_FALSE(train.empty());
  test_util::corrupt_middle_pages(train);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(180)), 1) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("node_restarts", -1), 0) << "no worker crashed on the damaged pages: " << res.dump();
  EXPECT_GT(res.value("tasks_failed", 0), 0) << res.dump();
  const auto reason = res.value("reason", "");
  EXPECT_NE(reason.find(train + "/data.mdb"), std::string::npos) << res.dump();
  EXPECT_NE(reason.find("quarantined"), std::string::npos) << res.dump();
  EXPECT_TRUE(no_processes_of(r));
  // The cause fixed (the resumed runner finds the cache damaged and rebuilds it), `--resume` tries the
  // quarantined tasks again, and the job finishes.
  const auto quarantined = res.value("tasks_failed", 0ull);
  resume_job(r);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(300)), 0) << read_file(r.err_file);
  auto again = result(r);
  EXPECT_EQ(again["reopened_tasks"].value("failed", 0ull), quarantined) << again.dump();
  EXPECT_EQ(again.value("tasks_failed", -1), 0) << again.dump();
  expect_all_done(r);
}

TEST(job_end, a_job_trains_on_record_stores_made_by_troupe_data) {
  auto dir = test_root("named-stores");
  std::string out;
  ASSERT_EQ(
      troupe("data synth-ctr --rows 20000 --fields 6 --vocab 50 --seed 1 --out " + dir + "/train", &out), 0)
      << out;
  ASSERT_EQ(troupe("data synth-ctr --rows 5000 --fields 6 --vocab 50 --seed 2 --out " + dir + "/test", &out),
            0)
      << out;
  auto job = ctr_job(2, 20000, 1);
  job = job.substr(0, job.find("[data]")) + "[data]\nsource = \"store\"\ntrain = \"" + dir +
        "/train\"\ntest = \"" + dir + "/test\"\n";
  // A token written in the file is no job's (each makes its own): the job directory's copy, which
  // every user may read, left it there.
  job += "[transport]\ntoken = \"sekrit-9f2e\"\n";
  auto r = start_job("named-stores-job", job);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("records_done", 0ull), 20000ull) << res.dump();
  EXPECT_GT(res.value("test_auc", 0.0), 0.6) << res.dump();
  EXPECT_EQ(read_file(r.job_dir + "/job.toml").find("sekrit-9f2e"), std::string::npos);
  EXPECT_NE(read_file(r.err_file).find("[transport] token: not used by a job"), std::string::npos)
      << read_file(r.err_file);
  EXPECT_TRUE(fs::exists(dir + "/train/data.mdb")) << "used in place, not copied or removed";
}

// A store with no records gives no task: refused before any node starts (the master's journal refused
// it and the master was restarted 10 times over 38 s, its error an internal one).
TEST(job_end, a_store_with_no_records_is_refused_before_any_node_starts) {
  auto dir = test_root("empty-store");
  std::string out;
  ASSERT_EQ(troupe("data synth-ctr --rows 5000 --fields 6 --vocab 50 --seed 2 --out " + dir + "/test", &out),
            0)
      << out;
  auto test = storage::record_store::open_read_only(dir + "/test");
  ASSERT_TRUE(test);
  auto w = storage::record_writer::create(dir + "/train", test->info().schema, "empty");
  ASSERT_TRUE(w) << w.err().to_string();
  ASSERT_TRUE(w->finish());
  auto job = ctr_job(2, 20000, 1);
  job = job.substr(0, job.find("[data]")) + "[data]\nsource = \"store\"\ntrain = \"" + dir +
        "/train\"\ntest = \"" + dir + "/test\"\n";
  auto r = start_job("empty-store-job", job);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 2) << read_file(r.err_file);
  const auto reason = result(r).value("reason", "");
  EXPECT_NE(reason.find(dir + "/train: the dataset holds no records: nothing to train on"), std::string::npos)
      << reason;
  EXPECT_EQ(read_file(r.job_dir + "/events.jsonl").find("\"join\""), std::string::npos) << "no node started";
}

// A store the job names that is damaged: the job ends at setup, and its final JSON says what is
// wrong and where (it said "setup failed (see logs/runner.log)").
TEST(job_end, a_damaged_store_named_by_the_job_is_the_reason_of_its_end) {
  auto dir = test_root("damaged-named-store");
  std::string out;
  for (const auto& [name, seed] : {std::pair{"train", 1}, std::pair{"test", 2}})
    ASSERT_EQ(troupe("data synth-ctr --rows 20000 --fields 6 --vocab 50 --seed " + std::to_string(seed) +
                         " --out " + dir + "/" + name,
                     &out),
              0)
        << out;
  test_util::corrupt_middle_pages(dir + "/train");
  auto job = ctr_job(2, 20000, 1);
  job = job.substr(0, job.find("[data]")) + "[data]\nsource = \"store\"\ntrain = \"" + dir +
        "/train\"\ntest = \"" + dir + "/test\"\n";
  auto r = start_job("damaged-named-store-job", job);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 1) << read_file(r.err_file);
  auto res = result(r);
  const auto reason = res.value("reason", "");
  EXPECT_NE(reason.find(dir + "/train/data.mdb"), std::string::npos) << res.dump();
  EXPECT_NE(reason.find("data.train"), std::string::npos) << res.dump();
  EXPECT_EQ(reason.find("see logs/runner.log"), std::string::npos) << res.dump();
  EXPECT_EQ(res, nlohmann::json::parse(read_file(r.job_dir + "/result.json"), nullptr, false));
}

// A one-worker job whose PS shards and worker go to host "h1:4" through `host_command` (a script),
// the master listening at this machine's address (loopback is refused with hosts).
job_run start_on_host_h1(const std::string& name, const std::string& host_command) {
  auto mine = cluster::local_address_towards("198.51.100.1");
  EXPECT_TRUE(mine) << "this machine has no route off loopback: " << mine.err().to_string();
  return start_job(name, ctr_job(1, 8192, 1) + "[cluster]\nhosts = [\"h1:4\"]\nhost_command = \"" +
                             host_command + " {host}\"\nadvertise = \"" + (mine ? *mine : "") + "\"\n");
}

// The node a "never joined the master" reason names ("": none).
std::string unjoined_node(const std::string& reason) {
  std::smatch m;
  if (!std::regex_search(reason, m, std::regex("^(ps-0|ps-1|worker-0) never joined the master: "))) return "";
  return m[1];
}

// Nodes whose host command never reaches their host (an ssh that cannot resolve it) end before they
// join: after 3 such ends in a row the job fails within seconds (not after 11 relaunches), and its
// final JSON, runner.log and timeline say which node, how its command ended, what it wrote, and
// what to check.
TEST(job_end, a_node_whose_host_command_fails_never_joins_and_the_job_says_why) {
  const auto bin = test_root("unreachable-host-bin");
  const auto ssh = bin + "/fake-ssh";
  std::ofstream(ssh)
      << "#!/bin/sh\necho \"ssh: Could not resolve hostname $1: Name or service not known\" >&2\n"
         "exit 255\n";
  ::chmod(ssh.c_str(), 0755);
  auto r = start_on_host_h1("unreachable-host", ssh);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 1) << read_file(r.err_file);
  auto res = result(r);
  const auto reason = res.value("reason", "");
  const auto node = unjoined_node(reason);
  ASSERT_FALSE(node.empty()) << reason;
  for (const auto& part :
       {std::string("its command on host h1 exited with code 255, 3 times in a row"),
        "its output (" + r.job_dir + "/logs/" + node + ".log) ends: ssh: Could not resolve hostname h1",
        std::string("check: does [cluster] host_command reach host h1? is the job directory on a filesystem "
                    "the nodes share? is the troupe binary at "),
        std::string(" on the node?")})
    EXPECT_NE(reason.find(part), std::string::npos) << part << " not in: " << reason;
  EXPECT_EQ(res.value("status", ""), "failed");
  EXPECT_LT(res.value("wall_seconds", 1e9), 30.0) << "it gave up at once";
  EXPECT_LE(res.value("node_restarts", 100), 6) << "at most 2 relaunches of each of the 3 nodes";
  EXPECT_EQ(res, nlohmann::json::parse(read_file(r.job_dir + "/result.json"), nullptr, false));
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log").find(reason), std::string::npos);
  auto end = event_kinds(r.job_dir, "job_end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(end[0]).value("cause", ""), reason);
  auto replaced = event_kinds(r.job_dir, "replaced");
  ASSERT_FALSE(replaced.empty());
  EXPECT_NE(replaced[0].find("exited with code 255 before it joined"), std::string::npos) << replaced[0];
  EXPECT_TRUE(no_processes_of(r));
}

// Nodes that run but never reach the master (a host cut off, an advertise the hosts cannot reach:
// here the host command points their --join at a closed port) end with troupe's own "could not
// join" code: they count as ends before joining, and the job fails naming the node's error (it
// relaunched them every 30 s for ever, runner.log saying only "exited with code 1").
TEST(job_end, nodes_that_cannot_reach_the_master_fail_the_job_naming_their_error) {
  const auto bin = test_root("cut-host-bin");
  const auto cut = bin + "/cut-host";
  std::ofstream(cut) << "#!/bin/bash\nshift  # the host\nargs=()\nwhile (($#)); do\n"
                        "  if [[ $1 == --join ]]; then args+=(--join 127.0.0.1:1); shift 2; continue; fi\n"
                        "  args+=(\"$1\"); shift\ndone\nexec \"${args[@]}\" --connect-timeout 1\n";
  ::chmod(cut.c_str(), 0755);
  auto r = start_on_host_h1("cut-host", cut);
  EXPECT_EQ(wait_job(r, std::chrono::seconds(90)), 1) << read_file(r.err_file);
  auto res = result(r);
  const auto reason = res.value("reason", "");
  const auto node = unjoined_node(reason);
  ASSERT_FALSE(node.empty()) << reason;
  for (const auto& part :
       {std::string("its command on host h1 exited with code 69, 3 times in a row"),
        "its last error (" + r.job_dir + "/logs/" + node + ".log): " + node + "#",
        std::string("cannot reach the master at --join 127.0.0.1:1 within 1 s"),
        std::string("check: does the node's host reach the master's address ([cluster] advertise")})
    EXPECT_NE(reason.find(part), std::string::npos) << part << " not in: " << reason;
  EXPECT_EQ(res.value("status", ""), "failed");
  EXPECT_TRUE(no_processes_of(r));
}

// A host command for two hosts: on `cut` the node's --join points at a closed port (its host cut
// off from the master: it cannot join, and ends with code 69 after 1 s); with `gone`, it runs there
// as elsewhere until the file <dir>/gone exists, then fails as ssh does for a machine that is off
// (exit 255). Elsewhere it runs as is.
std::string cut_host_command(const std::string& name, bool gone) {
  const auto dir = test_root(name), cmd = dir + "/one-host-cut";
  std::ofstream(cmd)
      << "#!/bin/bash\nhost=$1; shift\n[[ $host == cut ]] || exec \"$@\"\n"
      << (gone ? "[[ -e " + dir +
                     "/gone ]] || exec \"$@\"\n"
                     "echo \"ssh: connect to host cut port 22: No route to host\" >&2; exit 255\n"
               : "")
      << "args=()\nwhile (($#)); do\n"
         "  if [[ $1 == --join ]]; then args+=(--join 127.0.0.1:1); shift 2; continue; fi\n"
         "  args+=(\"$1\"); shift\ndone\nexec \"${args[@]}\" --connect-timeout 1\n";
  ::chmod(cmd.c_str(), 0755);
  return cmd;
}

job_run start_on_hosts(const std::string& name, const std::string& hosts, int workers, int epochs,
                       bool gone = false) {
  auto mine = cluster::local_address_towards("198.51.100.1");
  EXPECT_TRUE(mine) << "this machine has no route off loopback: " << mine.err().to_string();
  return start_job(name, ctr_job(workers, 8192, epochs) + "[cluster]\nhosts = [" + hosts +
                             "]\nhost_command = \"" + cut_host_command(name + "-bin", gone) +
                             " {host}\"\nadvertise = \"" + (mine ? *mine : "") + "\"\n");
}

// One host cut off from the master, another with room: the node that could not join from the cut
// host (ps-0: the job cannot train without it) is launched again on the other, and the job finishes
// (its replacements went back to the cut host's freed slot, and the job failed after 3 such ends).
TEST(job_end, a_node_that_cannot_reach_the_master_from_its_host_goes_to_another_host) {
  auto r = start_on_hosts("one-host-cut", "\"cut:1\", \"h2:4\"", 1, 1);
  ASSERT_EQ(wait_job(r, std::chrono::seconds(120)), 0) << read_file(r.err_file);
  const auto log = read_file(r.job_dir + "/logs/runner.log");
  EXPECT_NE(
      log.find("(exited with code 69): the job's next nodes go to other hosts where one has a free slot"),
      std::string::npos)
      << log;
  EXPECT_TRUE(no_processes_of(r));
}

// Waits until runner.log holds every one of `parts` (the job still running), then stops the job: it
// ends stopped (exit 3), nothing of it left running.
void stop_once_logged(job_run& r, const std::vector<std::string>& parts) {
  ASSERT_TRUE(poll_until(
      [&] {
        const auto log = read_file(r.job_dir + "/logs/runner.log");
        return exited(r) || std::all_of(parts.begin(), parts.end(),
                                        [&](const auto& p) { return log.find(p) != std::string::npos; });
      },
      std::chrono::seconds(90)))
      << read_file(r.job_dir + "/logs/runner.log");
  ASSERT_FALSE(exited(r)) << read_file(r.err_file);
  std::string out;
  ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(wait_job(r, std::chrono::seconds(60)), 3) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("status", ""), "stopped") << result(r).dump();
  EXPECT_TRUE(no_processes_of(r));
}

// A cut-off host and no room elsewhere: its worker is launched there again (the host may heal), 1 s
// after its first such end, then 2, 4, 8 ... 30 s, while the workers of the other host train on; the
// job does not fail for it (neither after 3 such ends nor by the rule for a node dying 11 times a
// minute).
TEST(job_end, a_worker_that_cannot_reach_the_master_while_others_train_does_not_fail_the_job) {
  auto r = start_on_hosts("cut-no-room", "\"h2:3\", \"cut:1\"", 2, 5000);
  stop_once_logged(r, {"4 times in a row; its last error",
                       "workers on other hosts reach the master and train on: it is launched again in 8 s"});
}

// A host gone as ssh sees it (exit 255, "No route to host") while workers of another host train:
// its worker is tried again with a growing wait, the job goes on (3 such ends failed it in 3 s).
TEST(job_end, a_worker_whose_host_is_gone_while_others_train_does_not_fail_the_job) {
  auto r = start_on_hosts("host-gone", "\"h2:3\", \"cut:1\"", 2, 5000, true);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 1 && j.value("workers_alive", 0) == 2; },
      std::chrono::seconds(120)));
  // The machine goes: its node dies with it, and its host command fails from now on.
  std::ofstream(fs::temp_directory_path() / ("troupe-job-test-" + std::to_string(::getpid())) /
                "host-gone-bin" / "gone");
  auto nodes = cluster::job_dir::open(r.job_dir)->read_nodes();
  ASSERT_TRUE(nodes);
  int victim = 0;
  for (const auto& n : nodes->nodes)
    if (n.host == "cut" && n.pid > 0) victim = n.pid;
  ASSERT_GT(victim, 0) << "no node on host cut";
  ::kill(victim, SIGKILL);
  stop_once_logged(r, {"exited with code 255, 4 times in a row",
                       "No route to host; check: ", "train on: it is launched again in 8 s"});
  EXPECT_NE(read_file(r.job_dir + "/events.jsonl").find("before it joined (its host is cut off)"),
            std::string::npos);
}

// A job the launcher refused before it started any node (here: Slurm's commands missing) leaves
// nothing to resume; a new run of its id, the job file fixed, replaces its directory (it was
// refused: "already exists ... continue it with --resume", and --resume read the refused file).
TEST(job_end, a_job_refused_before_any_node_started_can_be_run_again_under_its_id) {
  job_place place;
  place.root = test_root("refused-root");
  place.job_id = "refused";
  auto bad = start_job(
      "refused-1",
      ctr_job(1, 8192, 1) + "[cluster]\nlauncher = \"slurm\"\nslurm_bin_dir = \"/nonexistent\"\n", place);
  EXPECT_EQ(wait_job(bad, std::chrono::seconds(60)), 1) << read_file(bad.err_file);
  EXPECT_NE(result(bad).value("reason", "").find("/nonexistent/"), std::string::npos) << result(bad).dump();
  auto good = start_job("refused-2", ctr_job(1, 8192, 1), place);
  ASSERT_EQ(good.job_dir, bad.job_dir);
  ASSERT_EQ(wait_job(good, std::chrono::seconds(120)), 0) << read_file(good.err_file);
  EXPECT_EQ(result(good).value("status", ""), "finished");
  EXPECT_NE(read_file(good.err_file).find("never started a node"), std::string::npos)
      << read_file(good.err_file);
  // A job that did start nodes is kept: its id is refused and pointed at --resume... or, finished,
  // at another id.
  auto again = start_job("refused-3", ctr_job(1, 8192, 1), place);
  EXPECT_EQ(wait_job(again, std::chrono::seconds(60)), 2);
  EXPECT_NE(read_file(again.err_file).find("give another --job-id"), std::string::npos)
      << read_file(again.err_file);
}

}  // namespace
}  // namespace troupe::testing
