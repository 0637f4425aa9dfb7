// `troupe status` of a job whose runner is gone, from its timeline (control/src/client_timeline.*):
// the last metrics event, the job_end state, the workers asked for, the last notable events; the
// metrics and node_stats lines that make most of a long job's timeline are only peeked at.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client_timeline.hpp"
#include "lock_holder.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::control {
namespace {

using fields = std::vector<std::pair<std::string, observe::event_value>>;

observe::job_event event(const char* kind, std::uint64_t t_ms, fields f = {}) {
  observe::job_event e;
  e.kind = kind;
  e.t_ms = t_ms;
  e.fields = std::move(f);
  return e;
}

// <tmp>/<prefix><pid>, made empty.
std::filesystem::path empty_dir(const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(client_timeline, the_status_of_a_gone_runner_comes_from_the_last_metrics_and_the_notable_events) {
  const auto dir = empty_dir("troupe-client-timeline-");
  const std::string path = (dir / observe::events_file_name).string();
  {
    auto log = observe::event_log::open(path);
    ASSERT_TRUE(log) << log.err().to_string();
    std::uint64_t t = 1'795'000'000'000;
    ASSERT_TRUE((*log)->append(event("job_start", t, {{"workers", std::int64_t{3}}})));
    for (int i = 0; i < 30; ++i) {
      t += 1000;
      ASSERT_TRUE((*log)->append(
          event("metrics", t, {{"tasks_done", std::int64_t{i}}, {"workers_alive", std::int64_t{2}}})));
      ASSERT_TRUE((*log)->append(event("node_stats", t, {{"node", std::string("worker-0#0")}})));
      ASSERT_TRUE((*log)->append(event("join", t, {{"node", "worker-" + std::to_string(i) + "#0"}})));
    }
    ASSERT_TRUE((*log)->append(event("job_end", t + 10, {{"state", std::string("finished")}})));
  }
  // A metrics line torn by a crash (its newline added when the file was opened again): the one
  // before it is the last.
  std::ofstream(path, std::ios::app) << R"({"kind":"metrics","t_ms":1795000031000,"tasks_do)"
                                     << "\n";
  auto text = status_from_timeline(dir.string(), error{});
  ASSERT_TRUE(text) << text.err().to_string();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j.value("state", ""), "finished") << j.dump();
  EXPECT_EQ(j["tasks"].value("done", 0), 29) << j.dump();
  EXPECT_EQ(j.value("workers_alive", 0), 2) << j.dump();
  EXPECT_EQ(j.value("workers_target", 0), 3) << j.dump();
  ASSERT_EQ(j["recent"].size(), 20u) << j.dump();
  EXPECT_EQ(j["recent"].back().value("kind", ""), "job_end");
  EXPECT_EQ(j["recent"][18].value("node", ""), "worker-29#0");
  for (const auto& e : j["recent"]) EXPECT_NE(e.value("kind", ""), "metrics") << e.dump();
  std::filesystem::remove_all(dir);
}

// `troupe status` (stop, scale) without --job-dir: the newest job a runner runs or ran, not the job
// directory `train --local` leaves for its model (the helper's new-user pass: status, stop and
// scale took that one and failed on its missing nodes.json).
TEST(client_timeline, without_a_job_dir_the_newest_runner_job_is_taken) {
  namespace fs = std::filesystem;
  const std::string root =
      (fs::temp_directory_path() / ("troupe-find-" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  auto ran = cluster::job_dir::create(root, "ran", "[job]\n");
  ASSERT_TRUE(ran) << ran.err().to_string();
  std::ofstream(ran->lock_path()) << "";
  ::usleep(20000);  // a newer modification time
  auto local = cluster::job_dir::create(root, "job-local-1", "[job]\n");
  ASSERT_TRUE(local) << local.err().to_string();
  auto found = find_job_dir("", root);
  ASSERT_TRUE(found) << found.err().to_string();
  EXPECT_EQ(*found, root + "/ran");
  // A `troupe evaluate` after it, ended too: the job that trained is still the one meant (status
  // showed the evaluation's job, and stop said it was not running).
  ::usleep(20000);
  auto scored = cluster::job_dir::create(root, "evaluate-1", "[job]\nstrategy = 'predict'\n");
  ASSERT_TRUE(scored) << scored.err().to_string();
  std::ofstream(scored->lock_path()) << "";
  found = find_job_dir("", root);
  ASSERT_TRUE(found) << found.err().to_string();
  EXPECT_EQ(*found, root + "/ran");
  fs::remove_all(root);
}

// The master wrote result.json and the runner, busy writing the model, does not answer: the job is
// "ending" (it read "unreachable", with the result already ok beside it).
TEST(client_timeline, a_job_whose_master_finished_and_runner_is_busy_is_ending) {
  const auto dir = empty_dir("troupe-client-ending-");
  {
    auto log = observe::event_log::open((dir / observe::events_file_name).string());
    ASSERT_TRUE(log) << log.err().to_string();
    const auto now = static_cast<std::uint64_t>(troupe::clock::system().wall_ms());
    ASSERT_TRUE((*log)->append(event("job_start", now - 3000, {{"workers", std::int64_t{1}}})));
    ASSERT_TRUE((*log)->append(event("metrics", now - 500, {{"tasks_done", std::int64_t{6}}})));
  }
  std::ofstream(dir / "result.json") << R"({"ok":true,"tasks_done":6})"
                                     << "\n";  // the master's
  auto text = status_from_timeline(dir.string(), error{});
  ASSERT_TRUE(text) << text.err().to_string();
  auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j.value("state", ""), "ending") << j.dump();
  EXPECT_NE(j.value("reason", "").find("writing its model"), std::string::npos) << j.dump();
  std::ofstream(dir / "result.json") << R"({"ok":true,"status":"finished"})"
                                     << "\n";  // the runner's
  j = nlohmann::json::parse(*status_from_timeline(dir.string(), error{}));
  EXPECT_NE(j.value("state", ""), "ending") << j.dump();
  std::filesystem::remove_all(dir);
}

// `troupe stop` as the master finished the job: the runner dropped the stop's connection without an
// answer. Said as the job's state is (it read "runner went down before replying: runner/runner"):
// ending while its runner (here a child holding runner.lock) runs, ended once it wrote its result.
TEST(client_timeline, a_stop_the_runner_drops_as_the_job_ends_says_the_job_is_ending) {
  const auto root = empty_dir("troupe-client-stop-dropped-");
  auto dir = cluster::job_dir::create(root.string(), "sd", "[job]\n");
  ASSERT_TRUE(dir) << dir.err().to_string();
  const error dropped(core_errc::io_error, "runner went down before replying: runner/runner");
  EXPECT_EQ(stop_unanswered(dir->path(), troupe::clock::system(), dropped).to_string(), dropped.to_string())
      << "no result.json: the error as it was";
  std::ofstream(dir->result_path()) << R"({"ok":true})"
                                    << "\n";  // the master's
  const pid_t runner = test_util::hold_lock_in_child(dir->lock_path());
  ASSERT_GE(runner, 0);
  for (int i = 0; i < 500 && !dir->runner_pid(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(dir->runner_pid()) << "the child never held runner.lock";
  auto ending = stop_unanswered(dir->path(), troupe::clock::system(), dropped).to_string();
  EXPECT_NE(ending.find("job sd is ending: its master finished it"), std::string::npos) << ending;
  test_util::release_lock_child(runner);
  std::ofstream(dir->result_path()) << R"({"ok":true,"status":"finished"})"
                                    << "\n";  // the runner's
  auto ended = stop_unanswered(dir->path(), troupe::clock::system(), dropped).to_string();
  EXPECT_NE(ended.find("job sd is not running: it ended (finished; see"), std::string::npos) << ended;
  std::filesystem::remove_all(root);
}

// A resumed job whose runner does not answer: the earlier run's job_end (and its result.json) are
// over; it read "stopped" (the earlier run's end) however long the resumed runner had run.
TEST(client_timeline, a_resumed_run_is_not_the_earlier_runs_end) {
  const auto dir = empty_dir("troupe-client-resumed-");
  const auto now = static_cast<std::uint64_t>(troupe::clock::system().wall_ms());
  {
    auto log = observe::event_log::open((dir / observe::events_file_name).string());
    ASSERT_TRUE(log) << log.err().to_string();
    ASSERT_TRUE((*log)->append(event("job_start", now - 9000, {{"workers", std::int64_t{2}}})));
    ASSERT_TRUE((*log)->append(event("job_end", now - 8000, {{"state", std::string("stopped")}})));
    ASSERT_TRUE((*log)->append(event("job_start", now - 3000, {{"workers", std::int64_t{2}}})));
    ASSERT_TRUE((*log)->append(event("metrics", now - 500, {{"tasks_done", std::int64_t{6}}})));
  }
  std::ofstream(dir / "result.json") << R"({"ok":false,"status":"stopped"})"
                                     << "\n";  // the earlier run's
  auto j = nlohmann::json::parse(*status_from_timeline(dir.string(), error{}));
  EXPECT_EQ(j.value("state", ""), "unreachable") << j.dump();
  EXPECT_FALSE(j.value("finished", true)) << j.dump();
  EXPECT_FALSE(j.contains("result")) << j.dump();
  std::filesystem::remove_all(dir);
}

// Polls `pred` every 10 ms for up to 10 s.
bool eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A child process holding `dir`'s runner lock (a lock this process held would not show to itself:
// fcntl locks are per process), until it is killed.
pid_t hold_runner_lock(const cluster::job_dir& dir) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!dir.lock_runner()) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  return pid;
}

// Several jobs under one root (a team's): the running job whose runner started last is the target,
// however recently an older job's nodes.json changed (a restarted worker, a scale, a job's end made
// it the target and `troupe stop` stopped the wrong job); with none running, the last started.
TEST(client_timeline, without_a_job_dir_the_running_job_started_last_is_taken) {
  namespace fs = std::filesystem;
  const std::string root =
      (fs::temp_directory_path() / ("troupe-find-running-" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  const auto now = fs::file_time_type::clock::now();
  std::vector<pid_t> holders;
  auto make = [&](const std::string& id, std::chrono::seconds started, bool running) {
    auto d = cluster::job_dir::create(root, id, "[job]\n");
    EXPECT_TRUE(d) << d.err().to_string();
    std::ofstream(d->instance_path()) << "abcd\n";
    fs::last_write_time(d->instance_path(), now - std::chrono::hours(1) + started);
    std::ofstream(d->lock_path()) << "";
    if (running) holders.push_back(hold_runner_lock(*d));
    return *d;
  };
  make("alice", std::chrono::seconds(0), true);
  make("bob", std::chrono::seconds(10), true);
  make("carol", std::chrono::seconds(20), false);  // started after bob, and already ended
  for (const auto& id : {"alice", "carol"})        // their nodes.json changed last
    std::ofstream(root + "/" + id + "/nodes.json") << "{}";
  ASSERT_TRUE(eventually([&] { return cluster::job_dir::open(root + "/bob")->runner_pid().has_value(); }));
  ASSERT_TRUE(eventually([&] { return cluster::job_dir::open(root + "/alice")->runner_pid().has_value(); }));
  auto found = find_job_dir("", root);
  ASSERT_TRUE(found) << found.err().to_string();
  EXPECT_EQ(*found, root + "/bob");
  // Another user's directory is never taken without --job-dir (one made to look like the job
  // started last had root's `troupe stop` write into it).
  make("mallory", std::chrono::seconds(30), true);
  ASSERT_EQ(::chown((root + "/mallory").c_str(), 65534, 65534), 0);
  ASSERT_TRUE(
      eventually([&] { return cluster::job_dir::open(root + "/mallory")->runner_pid().has_value(); }));
  found = find_job_dir("", root);
  ASSERT_TRUE(found) << found.err().to_string();
  EXPECT_EQ(*found, root + "/bob");
  for (auto pid : holders) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  found = find_job_dir("", root);  // none running: the last started
  ASSERT_TRUE(found) << found.err().to_string();
  EXPECT_EQ(*found, root + "/carol");
  fs::remove_all(root);
}

// A job whose runner died has no result.json to take its loss from: the newest metrics event with
// a loss gives it (status said "loss -"); a window without a step (loss null) and a torn line are
// passed over, and a timeline far longer than the tail read still answers from its end.
TEST(client_timeline, the_last_logged_loss_is_the_newest_metrics_event_that_has_one) {
  const auto dir = empty_dir("troupe-client-loss-");
  const std::string path = (dir / observe::events_file_name).string();
  EXPECT_TRUE(std::isnan(last_logged_loss(dir.string()))) << "no timeline: no loss";
  {
    auto log = observe::event_log::open(path);
    ASSERT_TRUE(log) << log.err().to_string();
    std::uint64_t t = 1'795'000'000'000;
    for (int i = 0; i < 3000; ++i)  // ~300 KB: more than the 64 KiB tail
      ASSERT_TRUE((*log)->append(event("metrics", t += 1000, {{"loss", 1.0 + i * 1e-4}})));
    ASSERT_TRUE((*log)->append(event("metrics", t += 1000, {{"loss", 0.625}})));
    ASSERT_TRUE((*log)->append(event("join", t += 1000, {{"node", std::string("worker-3#0")}})));
    ASSERT_TRUE((*log)->append(event("metrics", t += 1000, {{"samples", std::int64_t{5}}})));  // no loss
  }
  std::ofstream(path, std::ios::app) << R"({"kind":"metrics","t_ms":1795000031000,"lo)"
                                     << "\n";
  EXPECT_DOUBLE_EQ(last_logged_loss(dir.string()), 0.625);
  std::filesystem::remove_all(dir);
}

// A job whose runner died while its nodes were Slurm jobs: they run on (and train) until their
// runner_timeout_s; the status says so ("dead" alone read as if nothing ran).
TEST(client_timeline, a_dead_runners_slurm_nodes_are_said_to_run_on) {
  const auto root = empty_dir("troupe-client-slurm-dead-");
  auto dir = cluster::job_dir::create(root.string(), "sj", "[job]\n");
  ASSERT_TRUE(dir) << dir.err().to_string();
  cluster::nodes_file f;
  f.job_id = "sj";
  for (auto [name, job] :
       {std::pair{"master", 41L}, std::pair{"worker-0", 42L}, std::pair{"worker-1", 43L}}) {
    cluster::node_record r;
    r.id = {name, 0};
    r.role = std::string(name) == "master" ? cluster::node_role::master : cluster::node_role::worker;
    r.state = "running";
    r.slurm_job = job;
    f.nodes.push_back(r);
  }
  std::ofstream(dir->nodes_path()) << cluster::to_json(f);
  auto text = job_status_json(dir->path());
  ASSERT_TRUE(text) << text.err().to_string();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j.value("state", ""), "dead") << j.dump();
  EXPECT_NE(j.value("reason", "").find("its 3 Slurm job(s) (troupe-sj:<node> in squeue) may still run"),
            std::string::npos)
      << j.dump();
  ASSERT_EQ(j["members"].size(), 3u) << j.dump();
  EXPECT_EQ(j["members"][1].value("slurm_job", 0L), 42) << "where each runs: " << j.dump();
  std::filesystem::remove_all(root);
}

// A live job's status lists the master's view; nodes the runner launched that are not in it yet
// (starting, queued in Slurm, unable to reach the master) are listed as "launched, not joined", with
// where they run; an exited one is not (the view says what became of it).
TEST(client_timeline, launched_nodes_not_yet_in_the_view_are_listed) {
  const auto root = empty_dir("troupe-client-unjoined-");
  auto dir = cluster::job_dir::create(root.string(), "uj", "[job]\n");
  ASSERT_TRUE(dir) << dir.err().to_string();
  cluster::nodes_file f;
  f.job_id = "uj";
  for (auto [name, state] : {std::pair{"master", "running"}, std::pair{"worker-0", "running"},
                             std::pair{"worker-1", "running"}, std::pair{"worker-2", "exited"}}) {
    cluster::node_record r;
    r.id = {name, 0};
    r.role = std::string(name) == "master" ? cluster::node_role::master : cluster::node_role::worker;
    r.state = state;
    r.pid = 100 + static_cast<int>(f.nodes.size());
    r.host = "h2";
    if (r.state == "exited") r.exit = "exited with code 1";
    f.nodes.push_back(r);
  }
  auto status = nlohmann::json::parse(R"({"members": [
      {"node": "master#0", "role": "master", "address": "10.0.0.1:1", "pid": 100, "state": "alive"},
      {"node": "worker-0#0", "role": "worker", "address": "10.0.0.1:2", "pid": 101, "state": "alive"}]})");
  std::ofstream(dir->nodes_path()) << cluster::to_json(f);
  add_placement(status, *dir);
  ASSERT_EQ(status["members"].size(), 3u) << status.dump();
  const auto& added = status["members"][2];
  EXPECT_EQ(added.value("node", ""), "worker-1#0") << status.dump();
  EXPECT_EQ(added.value("state", ""), "launched, not joined") << status.dump();
  EXPECT_EQ(added.value("pid", 0), 102) << status.dump();
  EXPECT_EQ(added.value("host", ""), "h2") << status.dump();
  EXPECT_EQ(status["members"][0].value("host", ""), "h2") << "the joined ones get their host too";
  std::filesystem::remove_all(root);
}

// A job `troupe run --submit` queued: its record (<root>/<id>.runner.job: the runner's Slurm job, the
// job file's slurm_bin_dir) tells status and stop of it, through that Slurm's squeue. A record this
// user did not write (writable by others, or a link) is not read: its bin directory's programs would
// run, and a forged job id be cancelled, by whoever runs `troupe stop` (root, in a shared root).
TEST(client_timeline, a_queued_runners_record_is_read_only_when_it_is_the_users_own) {
  const auto dir = empty_dir("troupe-queued-");
  const auto bin = dir / "bin", marker = dir / "squeue-ran";
  std::filesystem::create_directories(bin);
  std::ofstream(bin / "squeue") << "#!/bin/sh\ntouch " << marker.string() << "\necho PENDING\n";
  std::filesystem::permissions(bin / "squeue", std::filesystem::perms::owner_all);
  const auto job = (dir / "held").string(), record = (dir / "held.runner.job").string();
  std::ofstream(record) << "41\n" << bin.string() << "\n";
  std::filesystem::permissions(record,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto q = queued_job_at(job);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->id, "held");
  EXPECT_EQ(q->slurm_job, 41);
  EXPECT_EQ(q->state, "PENDING");
  EXPECT_FALSE(q->resumed);
  auto err = find_job_dir(job, dir.string());
  ASSERT_FALSE(err);
  EXPECT_NE(
      err.err().context().find("no such job directory: its runner, submitted as Slurm job 41, is PENDING"),
      std::string::npos)
      << err.err().context();
  // Writable by others: not read, nothing run.
  std::filesystem::remove(marker);
  std::filesystem::permissions(record, std::filesystem::perms::others_write,
                               std::filesystem::perm_options::add);
  EXPECT_FALSE(queued_job_at(job).has_value());
  EXPECT_FALSE(std::filesystem::exists(marker));
  // Through a link: the same.
  std::filesystem::rename(record, dir / "elsewhere");
  std::filesystem::permissions(dir / "elsewhere", std::filesystem::perms::others_write,
                               std::filesystem::perm_options::remove);
  std::filesystem::create_symlink(dir / "elsewhere", record);
  EXPECT_FALSE(queued_job_at(job).has_value());
  EXPECT_FALSE(std::filesystem::exists(marker));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::control
