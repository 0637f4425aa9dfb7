// The control plane under the faults of issue 20, with real processes and real signals: a
// SIGSTOPped master is fenced and replaced, two jobs with one id at once share nothing on the host,
// a job whose runner was SIGKILLed is resumed without retraining what was DONE, and workers added
// after a scale-down get new ids (no refusals, no false restarts). Label chaos: each runs a job of
// several seconds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "job_harness.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::testing {
namespace {

using namespace std::chrono_literals;

std::uint64_t done_tasks(const nlohmann::json& s) {
  return s["tasks"]["done"].get<std::uint64_t>();
}

// Leases beyond the first, summed over the DONE tasks: the tasks trained more than once.
std::size_t releases(const job_run& r) {
  std::size_t n = 0;
  for (const auto& [id, attempt] : done_attempts(r)) n += attempt - 1;
  return n;
}

// /dev/shm names of a job key ("<job>@<instance>" or a prefix of it).
std::vector<std::string> shm_names(const std::string& key_prefix) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("troupe-" + key_prefix, 0) == 0) v.push_back(name);
  }
  return v;
}

// The `samples` of the timeline's metrics events, in order.
std::vector<std::uint64_t> metrics_samples(const job_run& r) {
  std::vector<std::uint64_t> v;
  std::istringstream in(read_file(r.job_dir + "/events.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "metrics") v.push_back(e.value("samples", std::uint64_t{0}));
  }
  return v;
}

TEST(job_reliability, a_sigstopped_master_is_fenced_and_replaced) {
  auto r = start_job("master-stop", ctr_job(2, 300000, 4));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 10; }, 120s));
  pid_t master = node_pid(r, "master");
  ASSERT_GT(master, 0);
  auto start = cluster::read_process_stat(master);
  ASSERT_TRUE(start);
  ASSERT_EQ(::kill(master, SIGSTOP), 0);
  // While it is silent, `troupe status` shows no pace (not the hung master's last one)...
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["samples_per_sec"].get<double>() == 0.0; }, 30s));
  // ...and the stopped process is fenced (SIGKILL: no SIGCONT needed), never to wake up.
  EXPECT_TRUE(poll_until([&] { return !cluster::process_alive(master, start->start_time); }, 30s));
  // nodes.json names its replacement once it is launched (it listed the fenced one, exited, until
  // the next node's exit, which may be the job's end).
  EXPECT_TRUE(poll_until(
      [&] {
        const pid_t p = node_pid(r, "master");
        return p > 0 && p != master;
      },
      30s))
      << read_file(r.job_dir + "/nodes.json");
  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "finished") << res.dump();
  // Only the master restarted: no node was declared dead by a stale master.
  EXPECT_EQ(res.value("node_restarts", 0), 1) << res.dump();
  EXPECT_NE(read_file(r.job_dir + "/logs/master.log").find("master#1"), std::string::npos);
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log").find("fencing it"), std::string::npos);
  expect_all_done(r);
  // The replacement continues the timeline's sample count from counters.json, which the master
  // saves before each metrics event: it never goes back (it went from 3712 to 3200).
  auto samples = metrics_samples(r);
  for (std::size_t i = 1; i < samples.size(); ++i)
    EXPECT_GE(samples[i], samples[i - 1]) << "metrics event " << i;
  // Every task DONE once; at most the tasks the two workers held (two each) were leased again.
  EXPECT_LE(releases(r), 4u);
  EXPECT_TRUE(no_processes_of(r));
}

// A SIGSTOPped worker is declared dead by the master and fenced by the runner (SIGKILL). Its
// liveness beacon in /dev/shm goes once the runner has reaped it, while the job runs on: the master
// forgot the worker while it was still alive (stopped), so the beacon stayed until the job's end,
// one file per fence (a soak of 22 faults in 15 minutes left five).
TEST(job_reliability, a_fenced_workers_beacon_goes_when_it_is_reaped) {
  // Long enough (400 epochs, minutes: it is stopped) that its end, which removes every beacon, cannot
  // come first.
  auto r = start_job("worker-stop", mlp_job({.strategy = "allreduce", .workers = 3, .epochs = 400}));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 10; }, 120s));
  auto dir = cluster::job_dir::open(r.job_dir);
  ASSERT_TRUE(dir);
  const auto key = dir->job_id() + "@" + dir->read_instance();
  const pid_t worker = node_pid(r, "worker-1");
  ASSERT_GT(worker, 0);
  auto start = cluster::read_process_stat(worker);
  ASSERT_TRUE(start);
  std::string beacon;
  for (const auto& n : shm_names(key))
    if (n.find("-live-worker-1_") != std::string::npos) beacon = n;
  ASSERT_FALSE(beacon.empty()) << "worker-1's beacon among " << ::testing::PrintToString(shm_names(key));
  ASSERT_EQ(::kill(worker, SIGSTOP), 0);
  EXPECT_TRUE(poll_until([&] { return !cluster::process_alive(worker, start->start_time); }, 60s))
      << "fenced";
  EXPECT_TRUE(poll_until(
      [&] {
        auto names = shm_names(key);
        return std::find(names.begin(), names.end(), beacon) == names.end();
      },
      30s))
      << beacon << " still there";
  EXPECT_FALSE(exited(r)) << "the job runs on";
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log").find("fencing it"), std::string::npos);
  ASSERT_EQ(troupe("stop --job-dir " + r.job_dir), 0);
  EXPECT_EQ(wait_job(r, 120s), 3) << "stopped: " << read_file(r.err_file);
  EXPECT_TRUE(shm_names(key).empty());
}

TEST(job_reliability, two_jobs_with_one_id_at_once_share_no_host_names) {
  auto job = mlp_job({.strategy = "allreduce", .max_train_rows = 6000, .max_test_rows = 1000});
  auto a = start_job("twin-a", job, job_place{"", "", "twin"});
  auto b = start_job("twin-b", job, job_place{"", "", "twin"});
  ASSERT_TRUE(poll_until(
      [&] {
        auto ia = cluster::job_dir::open(a.job_dir), ib = cluster::job_dir::open(b.job_dir);
        return ia && ib && !ia->read_instance().empty() && !ib->read_instance().empty();
      },
      60s));
  auto ia = cluster::job_dir::open(a.job_dir)->read_instance();
  auto ib = cluster::job_dir::open(b.job_dir)->read_instance();
  EXPECT_NE(ia, ib);
  ASSERT_EQ(wait_job(a, 240s), 0) << read_file(a.err_file);
  ASSERT_EQ(wait_job(b, 240s), 0) << read_file(b.err_file);
  for (auto* r : {&a, &b}) {
    auto res = result(*r);
    EXPECT_GT(res.value("test_accuracy", 0.0), 0.70) << res.dump();
    expect_all_done(*r);
    EXPECT_EQ(read_file(r->job_dir + "/logs/worker-0.log").find("unexpected data"), std::string::npos);
  }
  EXPECT_TRUE(shm_names("twin@").empty());
}

TEST(job_reliability, runner_sigkill_then_resume_retrains_nothing_done) {
  auto r = start_job("resume", ctr_job(2, 300000, 4));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 10; }, 120s));
  ASSERT_TRUE(poll_until(
      [&] { return read_file(r.job_dir + "/logs/ps-0.log").find("first checkpoint") != std::string::npos; },
      60s));
  auto old_instance = cluster::job_dir::open(r.job_dir)->read_instance();
  ASSERT_FALSE(old_instance.empty());
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, 30s), -SIGKILL);
  // Its nodes die with it (PR_SET_PDEATHSIG).
  ASSERT_TRUE(poll_until([&] { return no_processes_of(r); }, 30s));
  auto before = done_attempts(r);
  ASSERT_GE(before.size(), 10u);

  // The dead job says so, and names the way on.
  std::string out;
  EXPECT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  auto st = nlohmann::json::parse(out, nullptr, false);
  EXPECT_EQ(st.value("state", ""), "dead") << out;
  EXPECT_NE(st.value("reason", "").find("--resume"), std::string::npos) << out;
  // Its nodes are not shown running (they died with the runner), and the samples the master had
  // counted are there (the status said "running" and 0 samples before 2026-11-30).
  ASSERT_TRUE(st["members"].is_array() && !st["members"].empty()) << out;
  for (const auto& m : st["members"]) EXPECT_EQ(m.value("state", ""), "gone (runner died)") << out;
  EXPECT_GT(st.value("samples_total", 0ull), 0ull) << out;
  // ... and no fewer than the done tasks hold (1,024 records each, the last of an epoch's 992): the
  // master's counters.json, saved every few seconds, lags the journal (a dead job showed 1,131,904
  // samples beside 368 done tasks).
  const auto done = st["tasks"].value("done", 0ull);
  EXPECT_GE(st.value("samples_total", 0ull), done * 1024 - (done / 293 + 1) * 32) << out;
  // A new run of the same id is refused and pointed at --resume.
  EXPECT_EQ(troupe("run " + r.dir + "/job.toml --job-id resume --quiet", &out), 2) << out;  // bad usage
  EXPECT_NE(out.find("--resume"), std::string::npos) << out;
  // Its rings and beacons stay in /dev/shm until a resume, or until `troupe stop` of the dead job
  // removes them (they stayed until a resume).
  EXPECT_FALSE(shm_names("resume@" + old_instance).empty()) << "the dead runner's nodes left their rings";
  EXPECT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 1) << out;
  EXPECT_NE(out.find("its runner died; removed what it left in shared memory"), std::string::npos) << out;
  EXPECT_TRUE(shm_names("resume@" + old_instance).empty());
  EXPECT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 1) << out;
  EXPECT_EQ(out.find("removed what it left"), std::string::npos) << "nothing was left this time: " << out;

  resume_job(r);
  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("status", ""), "finished") << res.dump();
  EXPECT_TRUE(res.value("resumed", false)) << res.dump();
  EXPECT_FALSE(res.contains("first_step_seconds")) << "its first step was the dead runner's: " << res.dump();
  EXPECT_GT(res.value("test_auc", 0.0), res.value("true_auc", 1.0) - 0.05) << res.dump();
  expect_all_done(r);
  // Nothing DONE before the kill was leased again.
  auto after = done_attempts(r);
  for (const auto& [id, attempt] : before) EXPECT_EQ(after[id], attempt) << "task " << id;
  EXPECT_NE(read_file(r.job_dir + "/logs/ps-0.log").find("restored checkpoint"), std::string::npos);
  // The resumed nodes are new incarnations, and the dead instance's shared memory is gone.
  EXPECT_NE(read_file(r.job_dir + "/logs/master.log").find("master#1"), std::string::npos);
  EXPECT_TRUE(shm_names("resume@" + old_instance).empty());
  EXPECT_TRUE(no_processes_of(r));
  // The timeline says the job was resumed after its runner died (it showed a second job_start and
  // nothing between), and status's recent events list it.
  EXPECT_NE(read_file(r.job_dir + "/events.jsonl").find("\"resumed\":\"dead\""), std::string::npos);
  ASSERT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  bool listed = false;
  const auto ended = nlohmann::json::parse(out);
  for (const auto& e : ended["recent"])
    listed = listed || (e.value("kind", "") == "job_start" &&
                        e.value("cause", "") == "resumed: the earlier run's runner died");
  EXPECT_TRUE(listed) << out;
}

// A runner that stops beating (SIGSTOP here: PR_SET_PDEATHSIG, which covers a SIGKILLed runner's
// local nodes, does not fire; on Slurm or other hosts nothing else would stop them) leaves no node
// running: each ends itself once runner.beat has not changed for [cluster] runner_timeout_s, saying
// how to go on, and --resume finishes the job. (Its Slurm jobs ran on for good before 2026-11-30.)
TEST(job_reliability, nodes_whose_runner_stops_beating_end_themselves) {
  auto r = start_job("beat", ctr_job(2, 300000, 4) + "\n[cluster]\nrunner_timeout_s = 3\n");
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 5; }, 120s));
  ASSERT_EQ(::kill(r.pid, SIGSTOP), 0);
  EXPECT_TRUE(poll_until([&] { return no_processes_of(r); }, 60s));
  for (const auto* node : {"master", "ps-0", "worker-0"})
    EXPECT_NE(read_file(r.job_dir + "/logs/" + node + ".log").find("the runner is gone; stopping"),
              std::string::npos)
        << node;
  ASSERT_EQ(::kill(r.pid, SIGKILL), 0);
  EXPECT_EQ(wait_job(r, 30s), -SIGKILL);
  resume_job(r);
  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("status", ""), "finished");
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

// A stopped job is continued by --resume too; a finished one is not resumed again.
TEST(job_reliability, a_stopped_job_resumes_and_a_finished_one_refuses) {
  auto r = start_job("stop-resume", ctr_job(2, 300000, 2));
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 5; }, 120s));
  std::string out;
  // A running job's status has a state, as every other answer has (it had none).
  ASSERT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out, nullptr, false).value("state", ""), "running") << out;
  // Its id again while it runs: refused, pointed at the running job (it said "continue it with
  // --resume", which the lock refuses).
  ASSERT_EQ(troupe("run " + r.dir + "/job.toml --job-id stop-resume --quiet", &out), 2) << out;
  EXPECT_NE(out.find("it is running, runner pid " + std::to_string(r.pid)), std::string::npos) << out;
  // Scaled while it ran: the resumed job comes back at 3 workers, not its job file's 2.
  ASSERT_EQ(troupe("scale --workers 3 --job-dir " + r.job_dir, &out), 0) << out;
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 3; }, 60s));
  ASSERT_EQ(troupe("stop --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_EQ(wait_job(r, 30s), 3);  // stopped on request (README exit codes)
  // The leases the stopped workers held went back to TODO once every node had exited: nothing is
  // shown in progress in a job that runs no more.
  auto stopped = result(r);
  EXPECT_EQ(stopped["tasks"].value("doing", 1), 0) << stopped.dump();
  auto before = done_attempts(r);
  // A node that outlived its runner (in its own process group, as the launcher starts nodes),
  // recorded in nodes.json with its start time: --resume kills it before it starts anything.
  pid_t orphan = ::fork();
  if (orphan == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "1000", nullptr);
    _exit(127);
  }
  ASSERT_TRUE(poll_until([&] { return cluster::read_process_stat(orphan).has_value(); }, 10s));
  auto dir = cluster::job_dir::open(r.job_dir);
  auto nodes = dir->read_nodes();
  ASSERT_TRUE(nodes);
  cluster::node_record rec;
  rec.id = node_id{"worker-9", 0};
  rec.pid = orphan;
  rec.start_time = cluster::read_process_stat(orphan)->start_time;
  rec.state = "running";
  nodes->nodes.push_back(rec);
  ASSERT_TRUE(dir->write_nodes(*nodes));
  resume_job(r);
  int st = 0;
  ASSERT_EQ(::waitpid(orphan, &st, 0), orphan);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  EXPECT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return j["workers_alive"] == 3; }, 60s));
  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("status", ""), "finished");
  EXPECT_NE(read_file(r.job_dir + "/events.jsonl").find("\"cause\":\"resumed: the earlier run stopped\""),
            std::string::npos);
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log")
                .find("worker-9#0 (pid " + std::to_string(orphan) + ") outlived"),
            std::string::npos);
  EXPECT_NE(read_file(r.job_dir + "/logs/runner.log").find("it resumes with 3"), std::string::npos);
  expect_all_done(r);
  auto after = done_attempts(r);
  for (const auto& [id, attempt] : before) EXPECT_EQ(after[id], attempt) << "task " << id;
  resume_job(r);
  EXPECT_EQ(wait_job(r, 60s), 2);
  EXPECT_NE(read_file(r.err_file).find("nothing to resume"), std::string::npos) << read_file(r.err_file);
  EXPECT_TRUE(no_processes_of(r));
}

// The runner killed as it wrote the model: result.json held the master's figures alone, the model
// was missing and the export's temporary directory stayed. `troupe status` said "finished" with no
// reason; now dead, pointed at --resume, which writes the model and sweeps the killed export's
// directory (each resume left one more).
TEST(job_reliability, a_runner_killed_as_it_writes_the_model_reads_dead_and_resume_writes_it) {
  auto r = start_job("model-unwritten", ctr_job(1, 20000, 1));
  ASSERT_EQ(wait_job(r, 120s), 0) << read_file(r.err_file);
  auto res = result(r);
  for (const char* runner_key : {"status", "reason", "model_dir", "exit_code", "model_seconds"})
    res.erase(runner_key);
  std::ofstream(r.job_dir + "/result.json") << res.dump();
  std::filesystem::remove_all(r.job_dir + "/model");
  pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string h(host);
  std::replace(h.begin(), h.end(), '-', '_');
  const auto killed_export = r.job_dir + "/model.tmp-" + h + "-" + std::to_string(gone) + "-0badf00d";
  std::filesystem::create_directories(killed_export);
  std::string out;
  EXPECT_EQ(troupe("status --json --job-dir " + r.job_dir, &out), 0) << out;
  auto st = nlohmann::json::parse(out, nullptr, false);
  EXPECT_EQ(st.value("state", ""), "dead") << out;
  EXPECT_NE(st.value("reason", "").find("its runner died before it wrote the job's result and model"),
            std::string::npos)
      << out;
  // stop and scale say the same (they said "it ended (finished)").
  EXPECT_EQ(troupe("scale --workers 2 --job-dir " + r.job_dir, &out), 1) << out;
  EXPECT_NE(out.find("is not running: its runner died"), std::string::npos) << out;
  // And chaos (it reported each fault "job over before the fault was due", exit 0).
  EXPECT_EQ(troupe("chaos --job-dir " + r.job_dir + " --fault '1 kill worker' --settle 1", &out), 1) << out;
  EXPECT_NE(out.find("is not running: its runner died"), std::string::npos) << out;
  resume_job(r);
  ASSERT_EQ(wait_job(r, 120s), 0) << read_file(r.err_file);
  EXPECT_EQ(result(r).value("status", ""), "finished");
  EXPECT_TRUE(std::filesystem::exists(r.job_dir + "/model/model.json"));
  EXPECT_FALSE(std::filesystem::exists(killed_export)) << "a killed export's directory stayed";
}

// The runner stopped for longer than the master's hang limit (Ctrl-Z, then fg): the master trained
// on meanwhile and is not fenced for the silence the runner could not hear (it was, and restarted).
TEST(job_reliability, a_paused_runner_does_not_fence_its_master) {
  // Paced to outlast the pause on any machine (~12 s: unpaced, it finished within the pause once
  // DeepFM trained 1.4x faster: the master ended the job while the runner was stopped, and no pause
  // was there to see).
  auto job = ctr_job(2, 200000, 2);
  job.replace(job.find("learning_rate = 0.01\n"), 21, "learning_rate = 0.01\nmax_samples_per_s = 16000\n");
  auto r = start_job("runner-pause", job);
  ASSERT_TRUE(wait_status(
      r, [](const nlohmann::json& j) { return done_tasks(j) >= 2; }, 120s));
  ASSERT_EQ(::kill(r.pid, SIGSTOP), 0);
  std::this_thread::sleep_for(8s);
  ASSERT_EQ(::kill(r.pid, SIGCONT), 0);
  ASSERT_EQ(wait_job(r, 240s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("node_restarts", -1), 0) << res.dump();
  EXPECT_EQ(res.value("master_starts", 0), 1) << res.dump();
  const auto log = read_file(r.job_dir + "/logs/runner.log");
  EXPECT_NE(log.find("the runner was paused for"), std::string::npos) << log;
  EXPECT_EQ(log.find("fencing it"), std::string::npos) << log;
}

TEST(job_reliability, scaling_4_1_4_gives_new_workers_new_ids) {
  auto r = start_job("scale-414", ctr_job(4, 600000, 2, 300, "min_workers = 1\n"));
  auto alive = [](std::uint32_t n) {
    return [n](const nlohmann::json& j) { return j["workers_alive"] == n && done_tasks(j) >= 1; };
  };
  ASSERT_TRUE(wait_status(r, alive(4), 120s));
  std::string out;
  // A target past the job's bounds is clamped, and said so.
  ASSERT_EQ(troupe("scale --workers 0 --job-dir " + r.job_dir, &out), 0) << out;
  EXPECT_NE(out.find("workers: 1 (asked 0: clamped to [1, 6]"), std::string::npos) << out;
  ASSERT_TRUE(wait_status(r, alive(1), 60s));
  ASSERT_EQ(troupe("scale --workers 4 --job-dir " + r.job_dir, &out), 0) << out;
  ASSERT_TRUE(wait_status(r, alive(4), 60s));
  // Every running node's pid comes with its real start time.
  auto nodes = cluster::job_dir::open(r.job_dir)->read_nodes();
  ASSERT_TRUE(nodes);
  for (const auto& n : nodes->nodes)
    if (n.state == "running") {
      auto st = cluster::read_process_stat(n.pid);
      ASSERT_TRUE(st) << n.id.to_string();
      EXPECT_EQ(n.start_time, st->start_time) << n.id.to_string();
    }
  ASSERT_EQ(wait_job(r, 300s), 0) << read_file(r.err_file);
  auto res = result(r);
  EXPECT_EQ(res.value("node_restarts", -1), 0) << res.dump();
  auto master_log = read_file(r.job_dir + "/logs/master.log");
  EXPECT_EQ(master_log.find("join of"), std::string::npos) << "a join was refused";
  nodes = cluster::job_dir::open(r.job_dir)->read_nodes();
  ASSERT_TRUE(nodes);
  std::size_t workers = 0;
  for (const auto& n : nodes->nodes) {
    EXPECT_EQ(n.state, "exited") << n.id.to_string();
    EXPECT_FALSE(n.exit.empty()) << n.id.to_string();
    if (n.role == cluster::node_role::worker) {
      ++workers;
      EXPECT_EQ(n.id.incarnation, 0u) << n.id.to_string();
    }
  }
  EXPECT_EQ(workers, 7u);  // worker-0..3, then worker-4..6 for the scale-up
  // The workers running together hold distinct slots (GPU = slot % devices), the lowest free ones.
  auto log = read_file(r.job_dir + "/logs/runner.log");
  std::set<std::string> slots;
  for (const char* w : {"worker-0#0", "worker-4#0", "worker-5#0", "worker-6#0"}) {
    auto at = log.find(std::string("launched ") + w);
    ASSERT_NE(at, std::string::npos) << w;
    auto s = log.find("slot ", at);
    slots.insert(log.substr(s, log.find(')', s) - s));
  }
  EXPECT_EQ(slots.size(), 4u) << log;
  expect_all_done(r);
  EXPECT_TRUE(no_processes_of(r));
}

}  // namespace
}  // namespace troupe::testing
