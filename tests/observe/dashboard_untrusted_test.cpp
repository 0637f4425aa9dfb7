// The dashboard as a server of untrusted input: job directories are written by whoever runs a job,
// so a link out of the root, a linked job directory, deep JSON, a FIFO, a device, a link loop or an
// unknown path must each give an error for that file (or a 404/405), never a file from outside the
// root, a crash, a hang or a failed listing. The real process under random input:
// tests/observe/dashboard_serve_test.py.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "troupe/observe/dashboard.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::observe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string secret = "TOP-SECRET-4f1c9";

class untrusted_jobs : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("troupe-untrusted-" + std::to_string(::getpid()));
    fs::remove_all(base_);
    root_ = base_ / "jobs";
    outside_ = base_ / "outside";
    fs::create_directories(root_);
    fs::create_directories(outside_ / "logs");
    std::ofstream(outside_ / "secret.txt") << secret << "\n";
    std::ofstream(outside_ / "secret.json") << R"({"secret": ")" << secret << R"("})";
    std::ofstream(outside_ / "logs" / "worker-0.log") << secret << "\n";
    std::ofstream(outside_ / events_file_name)
        << R"({"t_ms": 1, "kind": "job_start", "strategy": ")" << secret << R"("})"
        << "\n";
    make_job("good");
    handler_ = make_dashboard({root_.string(), "", false, {}, {}});
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  fs::path make_job(const std::string& id) {
    auto dir = root_ / id;
    fs::create_directories(dir / "logs");
    std::ofstream(dir / "job.toml") << "[job]\n";
    std::ofstream(dir / events_file_name) << R"({"t_ms": 1000, "kind": "job_start", "strategy": "async_ps"})"
                                          << "\n";
    std::ofstream(dir / "logs" / "worker-0.log") << "a log line\n";
    return dir;
  }

  http_response call(const std::string& method, const std::string& path) {
    http_request r;
    r.method = method;
    r.target = path;
    auto q = path.find('?');
    r.path = path.substr(0, q);
    if (q != std::string::npos) {
      auto kv = path.substr(q + 1);
      auto eq = kv.find('=');
      r.query[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    return handler_(r);
  }
  http_response get(const std::string& path) { return call("GET", path); }

  // The ids /api/jobs lists, and their rows.
  std::map<std::string, json> listed() {
    auto r = get("/api/jobs");
    EXPECT_EQ(r.status, 200) << r.body;
    std::map<std::string, json> by;
    auto j = json::parse(r.body);
    for (auto& row : j["jobs"]) by[row["id"]] = row;
    return by;
  }

  void expect_no_secret(const http_response& r, const std::string& what) {
    EXPECT_EQ(r.body.find(secret), std::string::npos)
        << what << " served a file outside the root: " << r.body;
    EXPECT_NE(r.status, 200) << what << ": " << r.body;
    EXPECT_LT(r.status, 500) << what << ": a refused file is the job's error, not the server's: " << r.body;
  }

  fs::path base_, root_, outside_;
  http_handler handler_;
};

TEST_F(untrusted_jobs, a_link_out_of_the_root_is_not_followed) {
  auto dir = root_ / "good";
  fs::remove(dir / "logs" / "worker-0.log");
  fs::create_symlink(outside_ / "secret.txt", dir / "logs" / "worker-0.log");
  fs::create_symlink(outside_ / "secret.json", dir / "nodes.json");
  fs::create_symlink(outside_ / "secret.json", dir / "result.json");
  expect_no_secret(get("/api/jobs/good/log/worker-0"), "a linked log");
  expect_no_secret(get("/api/jobs/good/nodes"), "a linked nodes.json");
  auto result = get("/api/jobs/good/result");
  EXPECT_EQ(result.body.find(secret), std::string::npos) << result.body;
  // A linked directory on the way: logs/ itself.
  auto evil = make_job("evil");
  fs::remove_all(evil / "logs");
  fs::create_symlink(outside_ / "logs", evil / "logs");
  expect_no_secret(get("/api/jobs/evil/log/worker-0"), "a log under a linked logs/");
  // A hard link names the same file as one outside the root.
  auto hard = make_job("hard");
  fs::remove(hard / "logs" / "worker-0.log");
  fs::create_hard_link(outside_ / "secret.txt", hard / "logs" / "worker-0.log");
  expect_no_secret(get("/api/jobs/hard/log/worker-0"), "a hard-linked log");
  // The events of a job whose events.jsonl is a link are not read.
  auto ev = make_job("linked-events");
  fs::remove(ev / events_file_name);
  fs::create_symlink(outside_ / events_file_name, ev / events_file_name);
  expect_no_secret(get("/api/jobs/linked-events/events"), "linked events");
  auto jobs = get("/api/jobs");
  EXPECT_EQ(jobs.body.find(secret), std::string::npos) << jobs.body;
  auto rows = listed();
  EXPECT_TRUE(rows.count("good"));
  ASSERT_TRUE(rows.count("linked-events"));
  EXPECT_NE(rows["linked-events"].value("error", "").find("symbolic link"), std::string::npos)
      << rows["linked-events"];
}

TEST_F(untrusted_jobs, a_linked_job_directory_is_not_a_job) {
  fs::create_directories(outside_ / "job");
  fs::copy(outside_ / events_file_name, outside_ / "job" / events_file_name);
  fs::create_symlink(outside_ / "job", root_ / "linked");
  auto rows = listed();
  EXPECT_TRUE(rows.count("good"));
  EXPECT_FALSE(rows.count("linked")) << rows["linked"];
  auto r = get("/api/jobs/linked/events");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.body.find(secret), std::string::npos) << r.body;
}

// Anyone on the host may ask the dashboard: run by root over a root several users share, it served
// one user's private (0700) job to any other. Another user's job is shown only as far as every user
// may read it; the dashboard's own user's jobs as ever.
TEST_F(untrusted_jobs, another_users_private_job_is_not_shown) {
  auto shut = make_job("alice-private");
  auto open = make_job("bob-open");
  for (const auto& d : {shut, open}) {
    for (const auto& e : fs::recursive_directory_iterator(d))
      ASSERT_EQ(::chown(e.path().c_str(), 65534, 65534), 0);
    ASSERT_EQ(::chown(d.c_str(), 65534, 65534), 0);
  }
  ASSERT_EQ(::chmod(shut.c_str(), 0700), 0);
  ASSERT_EQ(::chmod((open / "logs" / "worker-0.log").c_str(), 0600), 0);  // one private file
  auto rows = listed();
  EXPECT_FALSE(rows.count("alice-private")) << rows["alice-private"];
  EXPECT_TRUE(rows.count("bob-open"));
  EXPECT_TRUE(rows.count("good")) << "the dashboard's own user's job";
  auto log = get("/api/jobs/alice-private/log/worker-0");
  EXPECT_NE(log.status, 200) << log.body;
  EXPECT_EQ(log.body.find("a log line"), std::string::npos) << log.body;
  auto events = get("/api/jobs/alice-private/events");
  EXPECT_NE(events.status, 200) << events.body;
  log = get("/api/jobs/bob-open/log/worker-0");
  EXPECT_NE(log.status, 200) << log.body;
  EXPECT_EQ(log.body.find("a log line"), std::string::npos) << log.body;
  EXPECT_EQ(get("/api/jobs/bob-open/events").status, 200);
  EXPECT_EQ(get("/api/jobs/good/log/worker-0").status, 200);
}

TEST_F(untrusted_jobs, deep_json_is_an_error_of_that_file) {
  auto deep = make_job("deep");
  std::string nest(1'000'000, '[');
  std::ofstream(deep / "nodes.json") << nest;
  std::ofstream(deep / "result.json") << nest << std::string(1'000'000, ']');
  std::ofstream(deep / events_file_name, std::ios::app)
      << R"({"t_ms": 2000, "kind": "metrics", "x": )" << nest << std::string(1'000'000, ']') << "}\n";
  auto nodes = get("/api/jobs/deep/nodes");
  EXPECT_NE(nodes.status, 200);
  EXPECT_LT(nodes.status, 500) << nodes.body;
  auto result = get("/api/jobs/deep/result");
  EXPECT_TRUE(json::parse(result.body)["result"].is_null()) << result.body.substr(0, 200);
  auto events = get("/api/jobs/deep/events");
  ASSERT_EQ(events.status, 200);
  auto ev = json::parse(events.body);
  EXPECT_EQ(ev["events"].size(), 1u);
  EXPECT_EQ(ev["skipped"], 1);
  EXPECT_TRUE(listed().count("good"));
}

// Runs `f` on a thread of its own; when it has not returned within `limit`, `unblock` runs (so the
// test ends) and the call counts as hung.
template <class F, class U>
bool returns_within(std::chrono::seconds limit, F f, U unblock) {
  auto done = std::async(std::launch::async, f);
  if (done.wait_for(limit) == std::future_status::ready) return true;
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) unblock();
  return false;
}

TEST_F(untrusted_jobs, a_fifo_hangs_nothing) {
  auto piped = make_job("piped");
  fs::remove(piped / events_file_name);
  ASSERT_EQ(::mkfifo((piped / events_file_name).c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((piped / "nodes.json").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((piped / "logs" / "worker-1.log").c_str(), 0600), 0);
  auto unblock = [&] {  // a writer that opens and closes every FIFO: a blocked reader sees EOF
    for (const char* f : {"events.jsonl", "nodes.json", "logs/worker-1.log"}) {
      int fd = ::open((piped / f).c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  };
  std::map<std::string, json> rows;
  http_response events, nodes, log;
  EXPECT_TRUE(returns_within(
      std::chrono::seconds(10), [&] { rows = listed(); }, unblock))
      << "/api/jobs hung";
  EXPECT_TRUE(rows.count("good"));
  ASSERT_TRUE(rows.count("piped"));
  EXPECT_NE(rows["piped"].value("error", "").find("FIFO"), std::string::npos) << rows["piped"];
  EXPECT_TRUE(returns_within(
      std::chrono::seconds(10), [&] { events = get("/api/jobs/piped/events"); }, unblock));
  EXPECT_TRUE(returns_within(
      std::chrono::seconds(10), [&] { nodes = get("/api/jobs/piped/nodes"); }, unblock));
  EXPECT_TRUE(returns_within(
      std::chrono::seconds(10), [&] { log = get("/api/jobs/piped/log/worker-1"); }, unblock));
  for (auto* r : {&events, &nodes, &log}) {
    EXPECT_NE(r->status, 200) << r->body;
    EXPECT_LT(r->status, 500) << r->body;
  }
  EXPECT_NE(events.body.find("FIFO"), std::string::npos) << events.body;
}

TEST_F(untrusted_jobs, a_device_is_not_read) {
  auto dev = make_job("dev");
  fs::remove(dev / "logs" / "worker-0.log");
  fs::create_symlink("/dev/zero", dev / "logs" / "worker-0.log");
  fs::create_symlink("/dev/zero", dev / "nodes.json");
  fs::create_symlink("/dev/urandom", dev / "result.json");
  auto log = get("/api/jobs/dev/log/worker-0");
  EXPECT_NE(log.status, 200) << log.body.substr(0, 200);
  EXPECT_LT(log.status, 500);
  auto nodes = get("/api/jobs/dev/nodes");
  EXPECT_NE(nodes.status, 200);
  EXPECT_LT(nodes.status, 500);
  EXPECT_TRUE(json::parse(get("/api/jobs/dev/result").body)["result"].is_null());
  EXPECT_TRUE(listed().count("good"));
}

TEST_F(untrusted_jobs, a_link_loop_is_an_error_of_that_job) {
  auto loop = make_job("loop");
  fs::remove(loop / "job.toml");
  fs::remove(loop / events_file_name);
  fs::create_symlink("job.toml", loop / "job.toml");
  fs::create_symlink("b", loop / events_file_name);
  fs::create_symlink(events_file_name, loop / "b");
  fs::create_symlink("logs", loop / "logs" / "logs");
  auto rows = listed();
  EXPECT_TRUE(rows.count("good"));
  auto events = get("/api/jobs/loop/events");
  EXPECT_NE(events.status, 200);
  EXPECT_LT(events.status, 500) << events.body;
  EXPECT_EQ(get("/api/jobs/good/events").status, 200);
}

TEST_F(untrusted_jobs, unknown_paths_and_methods_are_404_and_405) {
  for (const char* p : {"/api", "/api/", "/api/x", "/api/job", "/api/jobs/good", "/api/jobs/good/",
                        "/api/jobs/good/nothing", "/api/jobs/good/log/", "/api/clusterx", "/api/jobsx"}) {
    auto r = get(p);
    EXPECT_TRUE(r.status == 404 || r.status == 400) << p << ": " << r.status << " " << r.body;
  }
  for (auto [m, p] : std::vector<std::pair<const char*, const char*>>{{"PUT", "/api/jobs"},
                                                                      {"DELETE", "/api/jobs/good/events"},
                                                                      {"POST", "/api/jobs"},
                                                                      {"POST", "/api/jobs/good/events"},
                                                                      {"GET", "/api/jobs/good/stop"},
                                                                      {"PATCH", "/api/cluster"},
                                                                      {"BREW", "/"}}) {
    auto r = call(m, p);
    EXPECT_EQ(r.status, 405) << m << " " << p << ": " << r.body;
  }
}

TEST_F(untrusted_jobs, a_finished_job_shows_its_result_not_its_last_sample) {
  auto done = make_job("done");
  std::ofstream(done / events_file_name, std::ios::app)
      << R"({"t_ms": 2000, "kind": "metrics", "workers_alive": 2, "tasks_todo": 0, "tasks_doing": 9, "tasks_done": 991})"
      << "\n"
      << R"({"t_ms": 3000, "kind": "job_end", "state": "finished"})"
      << "\n";
  std::ofstream(done / "result.json") << R"({"status": "finished", "tasks_done": 1000, "tasks_failed": 0})";
  auto row = listed()["done"];
  EXPECT_EQ(row["tasks_done"], 1000) << row;
  EXPECT_EQ(row["tasks_total"], 1000) << row;
}

TEST_F(untrusted_jobs, a_large_event_file_is_read_in_pieces) {
  auto big = make_job("big");
  {
    std::ofstream f(big / events_file_name, std::ios::app);
    std::string pad(1000, 'p');
    for (int i = 0; i < 12'000; ++i)
      f << R"({"t_ms": )" << 2000 + i << R"(, "kind": "note", "pad": ")" << pad << "\"}\n";
  }
  std::uint64_t offset = 0;
  std::size_t events = 0, requests = 0;
  while (requests < 100) {
    auto r = get("/api/jobs/big/events?after=" + std::to_string(offset));
    ++requests;
    ASSERT_EQ(r.status, 200);
    auto j = json::parse(r.body);
    events += j["events"].size();
    offset = j["next_offset"];
    if (!j.value("more", false)) break;
  }
  EXPECT_EQ(events, 12'001u);
  EXPECT_GT(requests, 1u) << "12 MB in one answer";
}

// A whole HTTP exchange on a fresh connection: what the server sent until it closed.
std::string exchange(std::uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// A control request waits for the job's runner to answer (a loaded runner: seconds): meanwhile the
// page's other requests are answered.
TEST_F(untrusted_jobs, a_slow_request_holds_up_only_its_own_connection) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  auto slow = make_dashboard({root_.string(),
                              "tok",
                              false,
                              [&](const std::string&, int, const std::string&) -> expected<control_answer> {
                                std::unique_lock lk(mu);
                                entered = true;
                                cv.notify_all();
                                cv.wait_for(lk, std::chrono::seconds(60), [&] { return release; });
                                return control_answer{};
                              },
                              {}});
  http_options o;
  o.threads = dashboard_threads;
  auto server = http_server::start(o, slow);
  ASSERT_TRUE(server) << server.err().to_string();
  auto port = (*server)->port();
  auto stop = std::async(std::launch::async, [&] {
    return exchange(
        port, "POST /api/jobs/good/stop HTTP/1.1\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n");
  });
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return entered; }))
        << "the stop never arrived";
  }
  auto list = std::async(std::launch::async, [&] {
    return exchange(port, "GET /api/jobs HTTP/1.1\r\nConnection: close\r\n\r\n");
  });
  bool answered = list.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(answered) << "the listing waited for the stop";
  EXPECT_NE(list.get().find("200 OK"), std::string::npos);
  EXPECT_NE(stop.get().find("202 Accepted"), std::string::npos);
}

}  // namespace
}  // namespace troupe::observe
