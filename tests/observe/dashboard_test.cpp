// The dashboard's JSON API over synthetic job directories (the files a real job writes), its
// refusal of paths that leave the root, and the token rules. The page itself is tested in
// Chromium by tests/observe/dashboard_browser_test.py.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "lock_holder.hpp"
#include "troupe/observe/dashboard.hpp"
#include "troupe/observe/job_events.hpp"
#include "troupe/observe/server_state.hpp"

namespace troupe::observe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class dashboard_api : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("troupe-dash-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    make_job("done-job", true, now_ms() - 60'000);
    make_job("live-job", false, now_ms() - 1'000);
    make_job("dead-job", false, now_ms() - 600'000);
    // Written a second ago, but its runner was on this machine (loopback) and holds no lock.
    make_job("local-dead-job", false, now_ms() - 2'000);
    std::ofstream(root_ / "local-dead-job" / "nodes.json")
        << R"({"job_id":"local-dead-job","runner_address":"127.0.0.1:4000","updated_ms":)" << now_ms() - 1'000
        << R"(,"nodes":[]})";
    handler_ = make_dashboard({root_.string(), "s3cret", false, {}, {}});
  }
  void TearDown() override { fs::remove_all(root_); }

  void make_job(const std::string& id, bool ended, std::int64_t t0) {
    auto dir = root_ / id;
    fs::create_directories(dir / "logs");
    std::ofstream(dir / "job.toml") << "[job]\nstrategy = \"async_ps\"\n";
    auto log = event_log::open((dir / events_file_name).string());
    ASSERT_TRUE(log);
    auto t = static_cast<std::uint64_t>(t0);
    ASSERT_TRUE((*log)->append(
        {t, "job_start", {{"strategy", std::string("async_ps")}, {"workers", std::int64_t{4}}}}));
    ASSERT_TRUE(
        (*log)->append({t + 10, "join", {{"node", std::string("worker-0#0")}, {"epoch", std::int64_t{1}}}}));
    ASSERT_TRUE((*log)->append({t + 500,
                                "metrics",
                                {{"samples", std::int64_t{1000}},
                                 {"loss", 0.5},
                                 {"workers_alive", std::int64_t{3}},
                                 {"tasks_todo", std::int64_t{5}},
                                 {"tasks_doing", std::int64_t{2}},
                                 {"tasks_done", std::int64_t{3}}}}));
    if (ended) {
      ASSERT_TRUE((*log)->append({t + 2000, "job_end", {{"state", std::string("finished")}}}));
    }
    std::ofstream(dir / "logs" / "worker-0.log") << std::string(100, 'x') << "last line\n";
    std::ofstream(dir / "nodes.json")
        << R"({"job_id":")" << id << R"(","updated_ms":)" << t << R"(,"nodes":[]})";
  }

  http_response get(const std::string& target, std::map<std::string, std::string> headers = {}) {
    http_request r;
    r.method = "GET";
    r.target = target;
    auto q = target.find('?');
    r.path = percent_decode(target.substr(0, q));
    if (q != std::string::npos) {
      std::string qs = target.substr(q + 1);
      for (std::size_t at = 0; at < qs.size();) {
        auto amp = qs.find('&', at);
        std::string kv = qs.substr(at, amp - at);
        auto eq = kv.find('=');
        r.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
        if (amp == std::string::npos) break;
        at = amp + 1;
      }
    }
    r.headers = std::move(headers);
    return handler_(r);
  }

  fs::path root_;
  http_handler handler_;
};

TEST_F(dashboard_api, lists_jobs_with_their_state) {
  auto r = get("/api/jobs");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = json::parse(r.body);
  ASSERT_EQ(j["jobs"].size(), 4u);
  std::map<std::string, json> by;
  for (auto& row : j["jobs"]) by[row["id"]] = row;
  EXPECT_EQ(by["done-job"]["state"], "finished");
  EXPECT_DOUBLE_EQ(by["done-job"]["duration_s"].get<double>(), 2.0);
  EXPECT_EQ(by["live-job"]["state"], "running");
  EXPECT_EQ(by["dead-job"]["state"], "dead") << "no job_end and nothing written for 10 minutes";
  EXPECT_EQ(by["local-dead-job"]["state"], "dead") << "a runner on loopback whose lock nobody holds is gone";
  EXPECT_EQ(by["live-job"]["strategy"], "async_ps");
  EXPECT_EQ(by["live-job"]["workers_wanted"], 4);
  EXPECT_EQ(by["live-job"]["workers_alive"], 3);
  EXPECT_EQ(by["live-job"]["tasks_total"], 10);
  EXPECT_EQ(j["jobs"][0]["id"], "live-job") << "most recent first";
  // An ended job's last metrics counted its workers before it ended; a crashed one says what to do.
  EXPECT_EQ(by["done-job"]["workers_alive"], 0);
  EXPECT_EQ(by["dead-job"]["workers_alive"], 0);
  EXPECT_NE(by["dead-job"].value("reason", "").find("troupe run --resume"), std::string::npos)
      << by["dead-job"];
}

// A job resumed after it ended (stopped): running again, not the earlier run's end, though that
// run's result.json is still there (it was listed "stopped" while it trained).
TEST_F(dashboard_api, a_resumed_job_is_running_not_its_earlier_end) {
  const auto dir = root_ / "done-job";
  std::ofstream(dir / "result.json") << R"({"ok":false,"status":"stopped","reason":"stopped on request"})";
  auto log = event_log::open((dir / events_file_name).string());
  ASSERT_TRUE(log);
  const auto t = static_cast<std::uint64_t>(now_ms());
  ASSERT_TRUE((*log)->append(
      {t, "job_start", {{"strategy", std::string("async_ps")}, {"workers", std::int64_t{2}}}}));
  auto j = json::parse(get("/api/jobs").body);
  json row;
  for (auto& r : j["jobs"])
    if (r["id"] == "done-job") row = r;
  EXPECT_EQ(row.value("state", ""), "running") << row;
  EXPECT_FALSE(row.contains("reason")) << row;
  EXPECT_EQ(row.value("workers_wanted", 0), 2) << row;
}

// A job with no timeline yet (its runner prepares the data) is listed by when its directory was
// made: newest first, not last as the oldest.
TEST_F(dashboard_api, a_job_without_a_timeline_yet_is_listed_by_when_it_was_made) {
  const auto dir = root_ / "new-job";
  for (auto sub : {"logs", "journal", "checkpoints"}) std::filesystem::create_directories(dir / sub);
  std::ofstream(dir / "job.toml") << "[job]\nstrategy = \"async_ps\"\n";
  auto jobs = json::parse(get("/api/jobs").body)["jobs"];
  ASSERT_FALSE(jobs.empty());
  EXPECT_EQ(jobs[0]["id"], "new-job") << jobs.dump();
  std::filesystem::remove_all(dir);
}

// A runner that holds the job's lock runs it however long it is silent (waiting for another job's
// import of its dataset it wrote nothing, and was listed "crashed" after 2 s).
TEST_F(dashboard_api, a_silent_job_whose_runner_holds_its_lock_is_not_crashed) {
  const auto dir = root_ / "dead-job";
  const pid_t holder = test_util::hold_lock_in_child((dir / "runner.lock").string());  // the runner
  std::string state;
  for (int i = 0; i < 500 && state != "running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto rows = json::parse(get("/api/jobs").body)["jobs"];
    for (const auto& row : rows)
      if (row["id"] == "dead-job") state = row["state"];
  }
  EXPECT_EQ(state, "running") << "its nodes.json is there: running, not crashed";
  // Its master's result.json written (no "status": the runner adds it as it ends): ending, as
  // `troupe status` says (the list said running).
  std::ofstream(dir / "result.json") << R"({"ok": true, "samples_trained": 10})";
  for (const auto& row : json::parse(get("/api/jobs").body)["jobs"])
    if (row["id"] == "dead-job") {
      EXPECT_EQ(row["state"], "ending") << row;
    }
  std::filesystem::remove(dir / "result.json");
  test_util::release_lock_child(holder);
  auto rows = json::parse(get("/api/jobs").body)["jobs"];
  for (const auto& row : rows) {
    if (row["id"] == "dead-job") {
      EXPECT_EQ(row["state"], "dead") << row;
    }
  }
}

// `train --local` leaves a job directory for its model: a job.toml and a result.json, no timeline.
// Its state is its result's (it was listed "crashed").
TEST_F(dashboard_api, a_local_training_is_listed_as_its_result_says) {
  fs::create_directories(root_ / "mlp-local-1");
  std::ofstream(root_ / "mlp-local-1" / "job.toml") << "[job]\n";
  std::ofstream(root_ / "mlp-local-1" / "result.json")
      << R"({"strategy":"local","ok":true,"test_accuracy":0.8})";
  auto r = get("/api/jobs");
  ASSERT_EQ(r.status, 200) << r.body;
  bool seen = false;
  const auto listed = json::parse(r.body);
  for (const auto& row : listed["jobs"])
    if (row["id"] == "mlp-local-1") {
      seen = true;
      EXPECT_EQ(row["state"], "finished") << row.dump();
    }
  EXPECT_TRUE(seen) << r.body;
}

// A hosts job's runner advertises an address of this machine's that is not loopback (10.78.0.1 in the
// test cluster): its lock tells here too (the job read "running" for 15 s after its runner was
// killed, where troupe status said dead). A runner at another machine's address is alive while the
// files are written.
TEST_F(dashboard_api, a_runner_at_any_address_of_this_machine_is_judged_by_its_lock) {
  std::string mine;
  ifaddrs* list = nullptr;
  ASSERT_EQ(::getifaddrs(&list), 0);
  for (auto* i = list; i && mine.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    if (std::string_view(buf).rfind("127.", 0) != 0) mine = buf;
  }
  ::freeifaddrs(list);
  ASSERT_FALSE(mine.empty()) << "this machine has no IPv4 address besides loopback";
  auto nodes = [&](const std::string& id, const std::string& runner) {
    make_job(id, false, now_ms() - 2'000);
    std::ofstream(root_ / id / "nodes.json") << R"({"job_id":")" << id << R"(","runner_address":")" << runner
                                             << R"(","updated_ms":)" << now_ms() - 1'000 << R"(,"nodes":[]})";
  };
  nodes("here-job", mine + ":4000");
  nodes("there-job", "192.0.2.7:4000");
  const auto jobs = json::parse(get("/api/jobs").body);
  std::map<std::string, json> by;
  for (const auto& row : jobs["jobs"]) by[row["id"]] = row;
  EXPECT_EQ(by["here-job"]["state"], "dead") << mine;
  EXPECT_EQ(by["there-job"]["state"], "running");
}

// A job refused as it started (a [cluster] setting its launcher could not use: a partition Slurm does
// not have) has a job_end and a result.json with its reason and strategy, no job_start and no tasks:
// its row said neither (troupe jobs printed "failed  -" and an empty reason).
TEST_F(dashboard_api, a_job_refused_as_it_started_shows_its_reason_and_strategy) {
  auto dir = root_ / "refused-job";
  fs::create_directories(dir);
  std::ofstream(dir / "job.toml") << "[job]\nstrategy = \"async_ps\"\n";
  auto log = event_log::open((dir / events_file_name).string());
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->append({static_cast<std::uint64_t>(now_ms()),
                              "job_end",
                              {{"state", std::string("failed")}, {"cause", std::string("launch failed")}}}));
  std::ofstream(dir / "result.json")
      << R"({"ok": false, "status": "failed", "strategy": "async_ps", "reason": "cluster: launch failed: )"
      << R"(cluster.worker_partition 'nosuch': no such partition"})";
  const auto jobs = json::parse(get("/api/jobs").body);
  std::map<std::string, json> by;
  for (const auto& row : jobs["jobs"]) by[row["id"]] = row;
  ASSERT_TRUE(by.count("refused-job")) << jobs;
  EXPECT_EQ(by["refused-job"]["state"], "failed");
  EXPECT_EQ(by["refused-job"]["strategy"], "async_ps");
  EXPECT_NE(by["refused-job"].value("reason", "").find("no such partition"), std::string::npos)
      << by["refused-job"];
}

TEST_F(dashboard_api, lists_model_servers_apart_from_jobs) {
  auto serve = root_ / "serve";
  auto write = [&](const std::string& name, const std::string& text) {
    fs::create_directories(serve / name);
    std::ofstream(serve / name / "server.json") << text;
  };
  auto now = std::to_string(now_ms());
  write("mlp",
        R"({"name": "mlp", "state": "serving", "listen": "127.0.0.1:8000", "started_ms": 5, "updated_ms": )" +
            now +
            R"(, "replicas_ready": 2, "replicas_wanted": 2, "requests_per_s": 120.5, "p99_ms": 1.5,
                   "requests_ok": 40, "requests_failed": 2, "requests_refused": 3,
                   "model": {"version": "job-1@7", "job_id": "job-1"}, "swap": {"state": "loading", "version": "job-2@9"},
                   "secret": "not copied"})");
  write("old", R"({"name": "old", "state": "serving", "updated_ms": 1000, "started_ms": 1})");
  write("done", R"({"name": "done", "state": "stopped", "updated_ms": 1000, "started_ms": 2,
                    "requests_per_s": 1.77, "rows_per_s": 1.77, "p50_ms": 1.03})");
  write("torn", R"({"name": "to)");
  write("odd", R"({"state": ["serving"], "updated_ms": "soon", "model": 3, "replicas_ready": {"x": 1}})");
  write("draining", R"({"name": "draining", "state": "draining", "updated_ms": )" + now + "}");
  // A server that holds its lock runs, however old its file (stopped by SIGSTOP, a slow disk): this
  // process holds it for it, as `troupe serve` does (flock, exclusive).
  write("held", R"({"name": "held", "state": "serving", "updated_ms": 1000, "started_ms": 3})");
  const int lock = ::open((serve / "held" / "server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  fs::create_directories(serve / "empty");
  fs::create_directory_symlink("/etc", serve / "linked");
  auto r = get("/api/servers");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = json::parse(r.body);
  std::map<std::string, json> by;
  for (auto& row : j["servers"]) by[row["name"]] = row;
  ::close(lock);
  EXPECT_EQ(by.size(), 8u) << r.body << " (the link is not followed)";
  EXPECT_EQ(by["mlp"]["state"], "serving");
  EXPECT_EQ(by["mlp"]["version"], "job-1@7");
  EXPECT_EQ(by["mlp"]["replicas_ready"], 2);
  EXPECT_EQ(by["mlp"]["url"], "http://127.0.0.1:8000/v2/models/mlp");
  EXPECT_EQ(by["mlp"]["swap"]["state"], "loading");
  EXPECT_FALSE(by["mlp"].contains("secret"));
  EXPECT_EQ(by["mlp"]["requests_failed"], 2);
  EXPECT_EQ(by["mlp"]["requests_refused"], 3) << "the 4xx answers (it was dropped)";
  EXPECT_EQ(by["old"]["state"], "dead")
      << "serving, but silent for long and no lock held (serve status's word)";
  EXPECT_EQ(by["draining"]["state"], "draining") << "it read 'gone' while a server drained";
  EXPECT_EQ(by["held"]["state"], "serving") << "its lock is held";
  EXPECT_EQ(by["done"]["state"], "stopped");
  // A stopped server serves nothing: its last second's rates are not shown as current (serve status
  // said 0 where the page said 1.77 req/s); its latencies stay, as the last it measured.
  EXPECT_EQ(by["done"]["requests_per_s"], 0.0);
  EXPECT_EQ(by["done"]["rows_per_s"], 0.0);
  EXPECT_EQ(by["done"]["p50_ms"], 1.03);
  EXPECT_EQ(by["torn"]["error"], "serve/torn/server.json: not JSON (yet)");
  EXPECT_EQ(by["odd"]["state"], "dead");
  EXPECT_FALSE(by["odd"].contains("replicas_ready"));
  EXPECT_NE(by["empty"]["error"].get<std::string>().find("server.json"), std::string::npos);
  // serve/ is no job: the job list is as before.
  EXPECT_EQ(json::parse(get("/api/jobs").body)["jobs"].size(), 4u);
}

// A server of this machine (its server.json names this kernel) that no longer holds its lock is dead
// at once, however fresh its file (a SIGKILLed server read `serving` here for 15 s where `troupe serve
// status` said dead); one of another machine of a shared root (its lock unseen) runs while its file
// is rewritten; one that wrote its end but holds its lock for its last moments reads as it wrote (it
// read `starting`). One rule for both readers (observe::server_state).
TEST_F(dashboard_api, a_server_of_this_machine_is_judged_by_its_lock_alone) {
  auto serve = root_ / "serve";
  const auto now = std::to_string(now_ms());
  auto write = [&](const std::string& name, const std::string& state, const std::string& kernel) {
    fs::create_directories(serve / name);
    std::ofstream(serve / name / "server.json")
        << R"({"name": ")" << name << R"(", "state": ")" << state << R"(", "kernel": ")" << kernel
        << R"(", "updated_ms": )" << now << "}";
  };
  ASSERT_FALSE(troupe::observe::kernel_id().empty()) << "/proc/sys/kernel/random/boot_id unreadable";
  write("killed", "serving", troupe::observe::kernel_id());
  write("elsewhere", "serving", "another-boot");
  write("ending", "stopped", troupe::observe::kernel_id());
  const int lock = ::open((serve / "ending" / "server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  std::map<std::string, std::string> by;
  const auto body = get("/api/servers").body;
  const auto servers = json::parse(body);
  for (const auto& row : servers["servers"])
    by[row["name"].get<std::string>()] = row["state"].get<std::string>();
  ::close(lock);
  SCOPED_TRACE(body);
  EXPECT_EQ(by["killed"], "dead");
  EXPECT_EQ(by["elsewhere"], "serving");
  EXPECT_EQ(by["ending"], "stopped");
  using troupe::observe::server_state;
  EXPECT_EQ(server_state(false, "serving", "another-boot", 20), "dead") << "silent for 20 s";
  EXPECT_EQ(server_state(false, "draining", "", 3), "draining") << "no kernel written: its file tells";
  EXPECT_EQ(server_state(false, "serving", "another-boot", -2), "serving") << "its machine's clock ahead";
  EXPECT_EQ(server_state(true, "", "", 0), "starting") << "holds its lock, wrote nothing yet";
  EXPECT_EQ(server_state(false, "failed", troupe::observe::kernel_id(), 0), "failed");
  EXPECT_EQ(server_state(false, "nonsense", "", 0), "");
  // From the file's text, as `serve status` and `jobs prune` read it: its age from updated_ms.
  using troupe::observe::server_state_of_json;
  EXPECT_EQ(server_state_of_json(false, R"({"state":"serving","kernel":"b","updated_ms":1000})", 21000),
            "dead");
  EXPECT_EQ(server_state_of_json(false, R"({"state":"serving","kernel":"b","updated_ms":1000})", 5000),
            "serving");
  EXPECT_EQ(server_state_of_json(true, R"({"state":"draining","updated_ms":"x"})", 0), "draining");
  EXPECT_EQ(server_state_of_json(false, "{not json", 0), "");
  EXPECT_EQ(server_state_of_json(false, R"(["serving"])", 0), "");
}

TEST_F(dashboard_api, events_follow_from_an_offset) {
  auto j = json::parse(get("/api/jobs/live-job/events").body);
  ASSERT_EQ(j["events"].size(), 3u);
  EXPECT_EQ(j["events"][1]["kind"], "join");
  EXPECT_EQ(j["events"][1]["node"], "worker-0#0");
  auto offset = j["next_offset"].get<std::uint64_t>();
  auto log = event_log::open((root_ / "live-job" / events_file_name).string());
  ASSERT_TRUE(
      (*log)->append({0, "died", {{"node", std::string("worker-0#0")}, {"cause", std::string("SIGKILL")}}}));
  auto more = json::parse(get("/api/jobs/live-job/events?after=" + std::to_string(offset)).body);
  ASSERT_EQ(more["events"].size(), 1u);
  EXPECT_EQ(more["events"][0]["kind"], "died");
  // An offset past the end (the file replaced by a shorter one): from its start, not stuck there.
  auto past = json::parse(get("/api/jobs/live-job/events?after=99999999").body);
  EXPECT_EQ(past["events"].size(), 4u) << past.dump();
  EXPECT_LT(past["next_offset"].get<std::uint64_t>(), 99999999u) << past.dump();
  // An offset is digits: "abc" read as 0 (every event again) and "-1" as 2^64 - 1.
  for (const char* bad : {"abc", "-1", "", "1e3"}) {
    EXPECT_EQ(get(std::string("/api/jobs/live-job/events?after=") + bad).status, 400) << bad;
    EXPECT_EQ(get(std::string("/api/jobs/live-job/log/worker-0?bytes=") + bad).status, 400) << bad;
  }
}

// serve/ (the servers) and the dataset cache sit beside the jobs: no job's routes answer for them
// (/api/jobs/serve/result was a 200 {"result": null}).
TEST_F(dashboard_api, a_directory_that_is_no_job_has_no_job_routes) {
  fs::create_directories(root_ / "serve" / "mlp");
  for (const char* what : {"result", "nodes", "events", "log/worker-0"})
    EXPECT_EQ(get(std::string("/api/jobs/serve/") + what).status, 404) << what;
}

TEST_F(dashboard_api, logs_nodes_and_results) {
  auto lj = json::parse(get("/api/jobs/live-job/log/worker-0?bytes=10").body);
  EXPECT_EQ(lj["text"], "last line\n");
  EXPECT_EQ(get("/api/jobs/live-job/log/worker-7").status, 404);
  EXPECT_EQ(get("/api/jobs/live-job/nodes").status, 200);
  EXPECT_TRUE(json::parse(get("/api/jobs/live-job/result").body)["result"].is_null());
  std::ofstream(root_ / "done-job" / "result.json") << R"({"test_auc": 0.85})";
  EXPECT_EQ(json::parse(get("/api/jobs/done-job/result").body)["result"]["test_auc"], 0.85);
}

TEST_F(dashboard_api, nothing_outside_the_root_is_reachable) {
  std::ofstream(root_ / "secret.txt") << "no";
  for (const char* t :
       {"/api/jobs/../secret.txt", "/api/jobs/%2e%2e/nodes", "/api/jobs/live-job/log/..%2f..%2fsecret",
        "/api/jobs/live-job/log/../../secret", "/api/jobs/.hidden/nodes"})
    EXPECT_EQ(get(t).status, 400) << t;
  // An encoded slash splits the id: "a" is simply not a job.
  EXPECT_EQ(get("/api/jobs/a%2fb/nodes").status, 404);
  EXPECT_EQ(get("/api/jobs/no-such-job/events").status, 404);
  EXPECT_EQ(get("/../../etc/passwd").status, 404);
  EXPECT_EQ(get("/api/nothing").status, 404);
}

TEST_F(dashboard_api, the_page_and_its_chart_library_are_embedded) {
  auto page = get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<script src=\"uplot.min.js\"></script>"), std::string::npos);
  auto js = get("/uplot.min.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_GT(js.body.size(), 40'000u);
  EXPECT_NE(get("/LICENSE.uplot.txt").body.find("MIT"), std::string::npos);
}

TEST_F(dashboard_api, tokens) {
  http_request post;
  post.method = "POST";
  post.path = "/api/jobs/live-job/stop";
  EXPECT_EQ(handler_(post).status, 401) << "changing a job always needs the token";
  post.headers["authorization"] = "Bearer s3cret";
  EXPECT_EQ(handler_(post).status, 501) << "authorised, but this dashboard has no control";
  bool stopped = false;
  auto h = make_dashboard(
      {root_.string(),
       "s3cret",
       true,
       [&](const std::string& dir, int workers, const std::string& who) -> expected<control_answer> {
         // Who asked goes with the request: the job's record names it. The directory is the
         // one the token was checked in, held open (/proc/self/fd/N), never a path that may be
         // swapped meanwhile.
         stopped = workers < 0 && dir.starts_with("/proc/self/fd/") &&
                   std::filesystem::read_symlink(dir).string().ends_with("live-job") &&
                   who.starts_with("the dashboard, for ");
         return control_answer{};
       },
       {}});
  auto accepted = h(post);
  EXPECT_EQ(accepted.status, 202) << "the stop is requested, the job ends after";
  EXPECT_EQ(json::parse(accepted.body).value("stop", ""), "requested") << accepted.body;
  EXPECT_TRUE(stopped);
  http_request list;
  list.method = "GET";
  list.path = "/api/jobs";
  EXPECT_EQ(h(list).status, 401) << "beyond loopback every request needs the token";
  list.query["token"] = "s3cret";
  EXPECT_EQ(h(list).status, 200);
  list.query["token"] = "s3creT";
  EXPECT_EQ(h(list).status, 401);
}

TEST_F(dashboard_api, a_torn_event_file_is_read_up_to_its_last_whole_line) {
  auto events = root_ / "live-job" / events_file_name;
  {
    std::ofstream f(events, std::ios::app);
    f << "not an event\n{\"t_ms\": 99, \"kind\": \"metr";  // a crash mid-write
  }
  ASSERT_EQ(get("/api/jobs").status, 200);
  auto r = json::parse(get("/api/jobs/live-job/events").body);
  EXPECT_EQ(r["events"].size(), 3u);
  EXPECT_EQ(r["skipped"], 1);
  EXPECT_LT(r["next_offset"].get<std::uint64_t>(), fs::file_size(events));
  // A restarted writer ends the torn line first; its own events read whole from where the reader was.
  auto log = event_log::open(events.string());
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->append({0, "job_end", {{"state", std::string("failed")}}}));
  auto next = json::parse(get("/api/jobs/live-job/events?after=" + r["next_offset"].dump()).body);
  ASSERT_EQ(next["events"].size(), 1u);
  EXPECT_EQ(next["events"][0]["kind"], "job_end");
  EXPECT_EQ(next["skipped"], 1) << "the torn line, now ended, is skipped";
}

TEST_F(dashboard_api, a_jobs_own_token_changes_that_job_only) {
  std::ofstream(root_ / "live-job" / "token") << "job-token\n";
  int calls = 0;
  auto h =
      make_dashboard({root_.string(),
                      "",
                      false,
                      [&](const std::string&, int workers, const std::string&) -> expected<control_answer> {
                        ++calls;
                        if (workers > 8) return control_answer{8, "clamped to [1, 8]"};
                        return control_answer{workers, ""};
                      },
                      {}});
  http_request post;
  post.method = "POST";
  post.path = "/api/jobs/live-job/scale";
  post.query["workers"] = "3";
  EXPECT_EQ(h(post).status, 401);
  post.headers["authorization"] = "Bearer job-token";
  auto ok = h(post);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(json::parse(ok.body).value("workers", 0), 3) << ok.body;
  post.path = "/api/jobs/done-job/scale";
  EXPECT_EQ(h(post).status, 401) << "another job's token";
  post.path = "/api/jobs/live-job/scale";
  // Digits only: an empty value read as 0 and shrank a live job to its minimum.
  for (const char* bad : {"-1", "", "3x", " 3", "+3", "16385"}) {  // 16,384: troupe scale's bound
    post.query["workers"] = bad;
    EXPECT_EQ(h(post).status, 400) << "'" << bad << "'";
  }
  post.query["workers"] = "9";
  auto clamped = h(post);
  EXPECT_EQ(json::parse(clamped.body).value("workers", 0), 8) << clamped.body;
  EXPECT_EQ(json::parse(clamped.body).value("note", ""), "clamped to [1, 8]") << clamped.body;
  post.path = "/";
  EXPECT_EQ(h(post).status, 405);
  EXPECT_EQ(calls, 2);
}

// /api/cluster with a stand-in for sinfo and sacct (the live proof is tests/slurm/slurm_dashboard_test.sh).
TEST_F(dashboard_api, cluster_page_from_recorded_slurm_jobs) {
  http_request get;
  get.method = "GET";
  get.path = "/api/cluster";
  get.headers["authorization"] = "Bearer s3cret";
  auto no_slurm = json::parse(handler_(get).body);
  EXPECT_EQ(no_slurm["slurm"], false);
  EXPECT_NE(no_slurm["why"].get<std::string>().find("slurm_jobs"), std::string::npos) << no_slurm;

  std::ofstream(root_ / "live-job" / "slurm_jobs") << "41\n42\n43\n; rm -rf /\n";
  std::vector<std::string> asked;
  bool fail = false;
  auto slurm = [&](const std::vector<std::string>& argv) -> expected<std::string> {
    if (fail) return make_unexpected(core_errc::io_error, "Unable to contact slurm controller");
    asked.push_back(argv.at(0) == "sacct" ? argv.at(5) : argv.at(0));
    if (argv.at(0) == "sinfo") return std::string("h1|4\nh2|4\n");
    return std::string(
        "41|troupe-live-job:master|high|1|1000|1010|COMPLETED\n"
        "42|troupe-live-job:worker-0|low|2|1000|1010|COMPLETED\n"
        "43|troupe-live-job:worker-1|low|2|Unknown|Unknown|PENDING\n"
        "99|someone-else|low|4|1000|1010|COMPLETED\n");
  };
  auto h = make_dashboard({root_.string(), "s3cret", true, {}, slurm});
  EXPECT_EQ(h(get).status, 200);
  get.headers.clear();
  EXPECT_EQ(h(get).status, 401) << "off loopback the cluster page needs the token too";
  get.headers["authorization"] = "Bearer s3cret";
  auto j = json::parse(h(get).body);
  EXPECT_EQ(asked, (std::vector<std::string>{"sinfo", "41,42,43"}))
      << "cached, and only numeric ids reach sacct";
  EXPECT_EQ(j["slurm"], true);
  EXPECT_EQ(j["total_cpus"], 8);
  ASSERT_EQ(j["jobs"]["live-job"].size(), 2u) << j;
  EXPECT_EQ(j["jobs"]["live-job"][1]["node"], "worker-0");
  EXPECT_EQ(j["series"]["cpus"][0][0], 3);
  EXPECT_DOUBLE_EQ(j["utilisation_avg"].get<double>(), 3.0 / 8.0);

  fail = true;
  auto h2 = make_dashboard({root_.string(), "", false, {}, slurm});
  auto r = h2(get);
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(json::parse(r.body)["why"].get<std::string>().find("slurm controller"), std::string::npos);
}

// sinfo hanging (slurmctld restarting): no request waits for it past the bound, and the answer
// arrives once it returns.
TEST_F(dashboard_api, a_hanging_slurm_command_holds_up_no_request) {
  std::ofstream(root_ / "live-job" / "slurm_jobs") << "41\n";
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  int calls = 0;
  auto slurm = [&](const std::vector<std::string>& argv) -> expected<std::string> {
    std::unique_lock lk(mu);
    ++calls;
    cv.wait(lk, [&] { return released; });
    if (argv.at(0) == "sinfo") return std::string("h1|4\n");
    return std::string("41|troupe-live-job:master|high|1|1000|1010|COMPLETED\n");
  };
  auto h = make_dashboard({root_.string(), "", false, {}, slurm});
  http_request get;
  get.method = "GET";
  get.path = "/api/cluster";
  for (int i = 0; i < 2; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = h(get);
    auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_NE(r.body.find("no answer yet"), std::string::npos) << r.body;
    EXPECT_LT(waited, std::chrono::seconds(10)) << "a request waited for the hanging command";
  }
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(calls, 1) << "one refresh at a time";
    released = true;
  }
  cv.notify_all();
  auto r = h(get);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["slurm"], true) << r.body;
}

}  // namespace
}  // namespace troupe::observe
