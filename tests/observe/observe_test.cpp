// observe: the Prometheus text format (checked by Debian's promtool when installed), the HTTP
// server under bad clients, and the event timeline's crash safety.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "run_command.hpp"
#include "troupe/observe/http_server.hpp"
#include "troupe/observe/job_events.hpp"
#include "troupe/observe/metrics.hpp"

namespace troupe::observe {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(metrics, renders_the_text_exposition_format) {
  registry r;
  r.get_counter("troupe_samples_total", "Samples trained.", {{"job", "j1"}, {"role", "worker"}}).inc(42);
  r.get_gauge("troupe_workers_alive", "Workers in the membership.", {{"job", "j1"}}).set(3);
  auto& h = r.get_histogram("troupe_step_seconds", "Step time.", {0.001, 0.01, 0.1}, {{"job", "j1"}});
  h.observe(0.0005);
  h.observe(0.05);
  h.observe(5);
  r.get_gauge("troupe_odd_label", "Escapes.", {{"why", "a \"quoted\"\nline\\"}}).set(1);
  std::string text = r.render();
  EXPECT_NE(
      text.find("# TYPE troupe_samples_total counter\ntroupe_samples_total{job=\"j1\",role=\"worker\"} 42\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("troupe_workers_alive{job=\"j1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("troupe_step_seconds_bucket{job=\"j1\",le=\"0.001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("troupe_step_seconds_bucket{job=\"j1\",le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("troupe_step_seconds_bucket{job=\"j1\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("troupe_step_seconds_count{job=\"j1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("why=\"a \\\"quoted\\\"\\nline\\\\\""), std::string::npos) << text;
  EXPECT_THROW(r.get_gauge("troupe_samples_total", "x"), std::invalid_argument);
  EXPECT_THROW(r.get_counter("bad-name", "x"), std::invalid_argument);
  EXPECT_THROW(r.get_counter("ok", "x", {{"__reserved", "v"}}), std::invalid_argument);

  ASSERT_EQ(::access("/usr/bin/promtool", X_OK), 0)
      << "promtool missing: scripts/install-deps.sh installs Debian's prometheus";
  auto dir = temp_dir("troupe-metrics");
  std::ofstream(dir / "m.txt") << text;
  auto check = test_util::run_command("/usr/bin/promtool check metrics < " + (dir / "m.txt").string());
  EXPECT_EQ(check.code, 0) << "promtool check metrics: " << check.out;
  fs::remove_all(dir);
}

// A raw client: sends `req`, returns everything the server answers until it closes or 2 s pass.
std::string raw(std::uint16_t port, const std::string& req) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::unique_ptr<http_server> echo_server(http_options o = {}) {
  auto s = http_server::start(o, [](const http_request& r) {
    if (r.path == "/boom") throw std::runtime_error("handler bug");
    if (r.path.find("..") != std::string::npos) return http_response{400, "text/plain", "no\n", {}};
    if (r.path != "/echo") return http_response{404, "text/plain", "not found\n", {}};
    std::string q = r.query.count("q") ? r.query.at("q") : "";
    std::string h = r.headers.count("x-h") ? " x-h=" + r.headers.at("x-h") : "";
    return http_response{200, "text/plain", r.method + " " + r.path + " q=" + q + h + "\n", {}};
  });
  EXPECT_TRUE(s) << s.err().to_string();
  return s ? std::move(*s) : nullptr;
}

TEST(http_server, answers_requests_and_decodes_paths_and_queries) {
  auto s = echo_server();
  ASSERT_TRUE(s);
  auto r = raw(s->port(), "GET /echo?q=a%20b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("GET /echo q=a b"), std::string::npos) << r;
  EXPECT_NE(raw(s->port(), "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n").find("404"), std::string::npos);
  // An encoded traversal reaches the handler decoded, so it can refuse it.
  EXPECT_NE(raw(s->port(), "GET /%2e%2e/etc/passwd HTTP/1.1\r\nConnection: close\r\n\r\n").find("400"),
            std::string::npos);
  EXPECT_NE(raw(s->port(), "GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n").find("500"), std::string::npos);
}

// RFC 9112: a server must accept an absolute-form target (it was a 404), and an HTTP/1.0 client's
// kept connection is said in the answer (Connection: keep-alive; the answer said nothing).
TEST(http_server, absolute_form_targets_and_http10_keep_alive) {
  auto s = echo_server();
  ASSERT_TRUE(s);
  auto r = raw(s->port(), "GET http://x:8000/echo?q=a%20b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("GET /echo q=a b"), std::string::npos) << r;
  r = raw(s->port(), "GET http://x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("404"), std::string::npos) << "the root path, not the echo: " << r;
  EXPECT_EQ(origin_form("https://h/a/b?c=1"), "/a/b?c=1");
  EXPECT_EQ(origin_form("http://h?c=1"), "/?c=1");
  EXPECT_EQ(origin_form("/a://b"), "/a://b");
  EXPECT_EQ(origin_form("*"), "*");
  r = raw(s->port(), "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /echo?q=2 HTTP/1.0\r\n\r\n");
  EXPECT_NE(r.find("Connection: keep-alive"), std::string::npos) << r;
  EXPECT_NE(r.find("GET /echo q=2"), std::string::npos) << "the kept connection's second request: " << r;
  r = raw(s->port(), "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.find("Connection: keep-alive"), std::string::npos) << "implied in HTTP/1.1: " << r;
}

TEST(http_server, a_header_sent_twice_is_one_list_not_its_last_value) {
  auto s = echo_server();
  ASSERT_TRUE(s);
  auto r = raw(s->port(), "GET /echo HTTP/1.1\r\nX-H: 10\r\nx-h: 20\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("x-h=10, 20\n"), std::string::npos) << r;
  r = raw(s->port(), "GET /echo HTTP/1.1\r\nX-H: 10\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("x-h=10\n"), std::string::npos) << r;
}

TEST(http_server, bad_clients_get_errors_and_the_server_stays_up) {
  http_options o;
  o.read_timeout = 300ms;
  auto s = echo_server(o);
  ASSERT_TRUE(s);
  std::string huge = "GET /echo HTTP/1.1\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n";
  EXPECT_NE(raw(s->port(), huge).find("431"), std::string::npos);
  EXPECT_NE(raw(s->port(), "NOT HTTP AT ALL\r\n\r\n").find("400"), std::string::npos);
  std::string big_body = "POST /echo HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n";
  EXPECT_NE(raw(s->port(), big_body).find("413"), std::string::npos);
  // A transfer coding besides chunked is refused, not read as plain chunked (its body compressed).
  auto gzipped = raw(s->port(), "POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
  EXPECT_NE(gzipped.find("501"), std::string::npos) << gzipped;
  EXPECT_NE(gzipped.find("Transfer-Encoding 'gzip, chunked' is not supported"), std::string::npos) << gzipped;
  // A client that sends half a request and goes silent is closed after the read timeout.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(raw(s->port(), "GET /echo HTTP/1.1\r\nHost"), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1900ms) << "closed by the server, not by the client's 2 s";
  EXPECT_NE(raw(s->port(), "GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n").find("200 OK"),
            std::string::npos);
}

// The server's own errors are JSON ({"error": ...}, as the serving protocol's); a HEAD is answered
// with the GET's headers and no body (a body after it desynchronised keep-alive clients); a client
// that sends `Expect: 100-continue` gets the interim answer before it sends its body (curl waited a
// second for it on every body over 1 MiB).
TEST(http_server, errors_are_json_head_has_no_body_and_100_continue_is_answered) {
  auto s = echo_server();
  ASSERT_TRUE(s);
  auto r = raw(s->port(), "POST /echo HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n");
  EXPECT_NE(r.find("413"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos) << r;
  EXPECT_NE(r.find("{\"error\":\"request body too large: more than 65536 bytes\"}"), std::string::npos)
      << r;  // the limit named

  r = raw(s->port(), "HEAD /echo HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 14\r\n"), std::string::npos) << r;  // "HEAD /echo q=\n"
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "") << r;

  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(s->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string head =
      "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);  // before any byte of the body is sent
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, "hello", 5, MSG_NOSIGNAL), 5);
  std::string out;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_NE(out.find("200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("POST /echo q="), std::string::npos) << out;
}

// max_connections under the open-file limit: the limit less 128, or less half of it under 256 (a
// limit of 160 kept 1024, and a flood ran the server out of descriptors: no answer, health probes
// included).
TEST(http_server, max_connections_stays_within_the_open_file_limit) {
  EXPECT_EQ(http_server::connections_within(1024, 65536), 1024u);
  EXPECT_EQ(http_server::connections_within(1024, 1024), 896u);
  EXPECT_EQ(http_server::connections_within(1024, 400), 272u);
  EXPECT_EQ(http_server::connections_within(1024, 160), 80u);
  EXPECT_EQ(http_server::connections_within(64, 160), 64u);
  EXPECT_EQ(http_server::connections_within(1024, 1), 1u);
}

TEST(http_server, a_thousand_parallel_connections_are_answered_or_refused_cleanly) {
  http_options o;
  o.max_connections = 64;
  o.read_timeout = 2s;
  auto s = echo_server(o);
  ASSERT_TRUE(s);
  std::vector<int> fds;
  for (int i = 0; i < 1000; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(s->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      fds.push_back(fd);
    else
      ::close(fd);
  }
  EXPECT_GT(fds.size(), 900u);
  int ok = 0, busy = 0;
  for (int fd : fds) {
    std::string req = "GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  }
  for (int fd : fds) {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string out;
    char buf[1024];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    ok += out.find("200 OK") != std::string::npos;
    busy += out.find("503") != std::string::npos;
    ::close(fd);
  }
  EXPECT_EQ(ok + busy, static_cast<int>(fds.size())) << "every connection got an answer";
  EXPECT_GE(ok, 64);
  EXPECT_NE(raw(s->port(), "GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n").find("200 OK"),
            std::string::npos);
}

TEST(http_server, a_bad_address_is_named) {
  http_options o;
  o.listen = "not-an-ip:80";
  auto s = http_server::start(o, [](const http_request&) { return http_response{}; });
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("not-an-ip:80"), std::string::npos);
}

TEST(job_events, append_read_and_continue_from_an_offset) {
  auto dir = temp_dir("troupe-events");
  auto path = (dir / events_file_name).string();
  auto log = event_log::open(path);
  ASSERT_TRUE(log) << log.err().to_string();
  ASSERT_TRUE(
      (*log)->append({0, "join", {{"node", std::string("worker-1#0")}, {"epoch", std::int64_t{3}}}}, true));
  ASSERT_TRUE((*log)->append({5, "metrics", {{"samples_per_s", 1234.5}, {"ok", true}}}));
  auto r = read_events(path);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[0].kind, "join");
  EXPECT_GT(r->events[0].t_ms, 1'600'000'000'000u) << "stamped with the wall clock";
  EXPECT_EQ(r->events[0].text("node"), "worker-1#0");
  EXPECT_EQ(r->events[0].number("epoch"), 3);
  EXPECT_EQ(r->events[1].t_ms, 5u);
  EXPECT_DOUBLE_EQ(r->events[1].number("samples_per_s"), 1234.5);
  ASSERT_TRUE((*log)->append({0, "leave", {}}));
  auto more = read_events(path, r->next_offset);
  ASSERT_TRUE(more);
  ASSERT_EQ(more->events.size(), 1u);
  EXPECT_EQ(more->events[0].kind, "leave");
  fs::remove_all(dir);
}

TEST(job_events, a_torn_line_is_skipped_and_appends_go_on_after_it) {
  auto dir = temp_dir("troupe-events-torn");
  auto path = (dir / events_file_name).string();
  {
    auto log = event_log::open(path);
    ASSERT_TRUE(log);
    ASSERT_TRUE((*log)->append({1, "join", {}}));
  }
  std::ofstream(path, std::ios::app) << "{\"t_ms\": 2, \"ki";  // a crash mid-write
  auto r = read_events(path);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->events.size(), 1u) << "the unfinished line waits";
  auto log = event_log::open(path);  // the restarted master
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->append({3, "leave", {}}));
  std::ofstream(path, std::ios::app) << "garbage that is not json\n";
  r = read_events(path);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_EQ(r->events[1].kind, "leave");
  EXPECT_EQ(r->skipped, 2u);
  fs::remove_all(dir);
}

TEST(job_events, a_full_disk_is_named) {
  auto log = event_log::open("/dev/full");
  ASSERT_TRUE(log) << log.err().to_string();
  auto res = (*log)->append({0, "join", {}});
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().to_string().find("No space left on device"), std::string::npos)
      << res.err().to_string();
}

}  // namespace
}  // namespace troupe::observe
