// Multi-process tests: real `troupe net serve` processes on loopback, killed and stopped for real.
// The watcher is either an endpoint in this test process or another `troupe net serve`.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "endpoint_testing.hpp"
#include "troupe/transport/diag.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/transport/errc.hpp"

extern char** environ;

namespace troupe {
namespace {
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string token = "cluster-secret-42";

fs::path temp_file(const std::string& stem, const std::string& content = "") {
  static int n = 0;
  auto p = fs::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(++n));
  std::ofstream(p) << content;
  return p;
}

// A child process with stdout on a pipe (read line by line) and stderr in a file.
class child {
 public:
  explicit child(std::vector<std::string> args) : err_path_(temp_file("troupe_stderr")) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_TRUNC, 0644);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    args.insert(args.begin(), TROUPE_BIN);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, TROUPE_BIN, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::kill(pid_, SIGCONT);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
    fs::remove(err_path_);
  }
  // Next stdout line, or "" after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = steady::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
      if (left <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char tmp[4096];
      auto n = ::read(out_, tmp, sizeof tmp);
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }
  // Reads lines until one contains `needle`; returns it ("" on timeout).
  std::string wait_for(const std::string& needle, std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = steady::now() + timeout;
    while (steady::now() < deadline) {
      auto line = read_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()));
      if (line.find(needle) != std::string::npos) return line;
    }
    return "";
  }
  void signal(int sig) { ::kill(pid_, sig); }
  int stop() {  // SIGTERM and reap; returns the exit status
    int st = 0;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }
  std::string stderr_text() const {
    std::ifstream in(err_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
  fs::path err_path_;
};

struct served {
  std::unique_ptr<child> proc;
  std::string address;
};

served serve(const std::string& name, const fs::path& token_file, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"net",      "serve",       "--name",       name,
                                   "--listen", "127.0.0.1:0", "--token-file", token_file.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  served s{std::make_unique<child>(args), ""};
  auto line = s.proc->read_line();
  EXPECT_EQ(line.rfind("listening ", 0), 0u) << "got '" << line << "'\n" << s.proc->stderr_text();
  if (line.size() > 10) s.address = line.substr(10);
  return s;
}

std::unique_ptr<endpoint> make(const std::string& name, std::string tok = token, int hb_ms = 100,
                               int timeout_ms = 1000) {
  transport_config c;
  c.token = std::move(tok);
  c.heartbeat_interval = std::chrono::milliseconds(hb_ms);
  c.heartbeat_timeout = std::chrono::milliseconds(timeout_ms);
  c.reconnect_attempts = 0;
  auto e = endpoint::create(node_id{name, 0}, c);
  EXPECT_TRUE(e) << e.err().to_string();
  return std::move(*e);
}

double ms_since(steady::time_point t) {
  return std::chrono::duration<double, std::milli>(steady::now() - t).count();
}

class net_process : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove(token_file_); }
  fs::path token_file_ = temp_file("troupe_token", token + "\n");
};

// The watchers learn of the death from the closed connection, not from missed heartbeats; how fast
// (about 1 ms on an idle machine) is bench/recovery's death_notice_bench: a machine running the
// suite on 2 busy cores took 154 ms once, so no time limit here.
TEST_F(net_process, sigkill_peer_watcher_gets_down_from_the_closed_connection) {
  auto target = serve("target", token_file_);
  auto w = make("watcher");
  ASSERT_TRUE(w->connect(target.address, false));
  std::promise<steady::time_point> down;
  std::string reason;
  w->watch("target", "echo", [&](const actor_address&, const std::string& r) {
    reason = r;
    down.set_value(steady::now());
  });
  ASSERT_TRUE(run_ping(*w, {"target", "echo", 10, 0, 8}));  // watch registered, link warm
  // A second watcher that is itself a troupe process.
  auto w2 = serve("watcher-two", token_file_, {"--connect", target.address, "--watch", "echo@target"});
  ASSERT_NE(w2.proc->wait_for("peer_up"), "") << w2.proc->stderr_text();
  ASSERT_NE(w2.proc->wait_for("\"watching\""), "");
  std::this_thread::sleep_for(100ms);

  const auto t0 = steady::now();
  target.proc->signal(SIGKILL);
  auto f = down.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  const double in_process_ms = std::chrono::duration<double, std::milli>(f.get() - t0).count();
  auto line = w2.proc->wait_for("watch_down", 2000ms);
  const double cli_ms = ms_since(t0);
  std::printf("down after SIGKILL: in-process watcher %.2f ms, troupe-process watcher <= %.2f ms\n",
              in_process_ms, cli_ms);
  EXPECT_NE(reason.find("node down"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("heartbeat"), std::string::npos) << reason;
  ASSERT_NE(line, "");
  EXPECT_NE(line.find("\"name\":\"echo\""), std::string::npos) << line;
  EXPECT_EQ(line.find("heartbeat"), std::string::npos) << line;
}

TEST_F(net_process, sigstop_peer_is_declared_dead_within_the_heartbeat_timeout) {
  auto target = serve("stopped", token_file_, {"--heartbeat-ms", "50"});
  constexpr int timeout_ms = 500;
  auto w = make("watcher", token, 50, timeout_ms);
  std::promise<std::pair<steady::time_point, std::string>> down;
  w->on_peer_down([&](const peer_event& e) { down.set_value({steady::now(), e.reason}); });
  ASSERT_TRUE(w->connect(target.address, false));
  ASSERT_TRUE(run_ping(*w, {"stopped", "echo", 10, 0, 8}));
  // Heartbeats keep a quiet but live peer up: waited for as the event, enough of its heartbeats
  // (every 50 ms) to span three heartbeat timeouts, after which it must still be up.
  const std::uint64_t beats = 3 * timeout_ms / 50, base = w->stats().frames_received;
  for (auto until = steady::now() + 10s; w->stats().frames_received < base + beats && steady::now() < until;)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(w->stats().frames_received, base + beats) << "the quiet peer's heartbeats stopped coming";
  ASSERT_TRUE(w->connected("stopped"));

  const auto t0 = steady::now();
  target.proc->signal(SIGSTOP);
  auto f = down.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto [t, reason] = f.get();
  const double dt = std::chrono::duration<double, std::milli>(t - t0).count();
  std::printf("SIGSTOP: declared dead after %.1f ms (timeout %d ms): %s\n", dt, timeout_ms, reason.c_str());
  EXPECT_NE(reason.find("heartbeat timeout"), std::string::npos) << reason;
  EXPECT_GT(dt, timeout_ms / 2.0);    // not before the peer could have been silent that long
  EXPECT_LT(dt, timeout_ms + 400.0);  // the timeout plus scheduling slack on a busy machine
  target.proc->signal(SIGCONT);
}

TEST_F(net_process, wrong_or_missing_token_is_refused_and_logged) {
  auto target = serve("guarded", token_file_);
  for (std::string tok : {"not-the-token", ""}) {
    auto w = make("intruder", tok);
    auto r = w->connect(target.address, false);
    ASSERT_FALSE(r) << "token '" << tok << "' was accepted";
    EXPECT_EQ(r.err(), transport_errc::auth_failed) << r.err().to_string();
  }
  // A peer with the token still gets in.
  auto ok = make("friend");
  ASSERT_TRUE(ok->connect(target.address, false));
  ASSERT_TRUE(run_ping(*ok, {"guarded", "echo", 5, 0, 8}));
  ok.reset();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(target.proc->stop(), 0);
  std::string out, line;
  while (!(line = target.proc->read_line(500ms)).empty()) out += line + "\n";
  const auto err = target.proc->stderr_text();
  EXPECT_NE(err.find("refused connection from 127.0.0.1"), std::string::npos) << err;
  EXPECT_NE(err.find("wrong cluster token (peer claims to be intruder#0)"), std::string::npos) << err;
  EXPECT_EQ(out.find("intruder"), std::string::npos) << "an unauthenticated peer came up:\n" << out;
  EXPECT_NE(out.find("\"auth_refused\":2"), std::string::npos) << out;
}

int raw_connect(const std::string& address) {
  auto hp = parse_host_port(address);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp->port);
  ::inet_pton(AF_INET, hp->host.c_str(), &sa.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

// True when the peer closes the socket within `timeout` (reads and discards its hello).
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  char buf[4096];
  while (steady::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return true;
  }
  return false;
}

std::vector<std::byte> u32s(std::initializer_list<std::uint32_t> v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

TEST_F(net_process, malformed_frames_close_only_that_connection) {
  auto target = serve("robust", token_file_);
  auto good = make("good");
  ASSERT_TRUE(good->connect(target.address, false));
  struct bad_case {
    const char* what;
    std::vector<std::byte> bytes;
    const char* logged;
  };
  std::vector<std::byte> garbage(256);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 37 + 11);
  auto table = u32s({0, 31});  // a valid table (one segment of 31 words) over garbage words
  std::memcpy(garbage.data(), table.data(), table.size());
  std::vector<bad_case> cases = {
      {"bad segment count", u32s({100000, 1, 0, 0}), "bad segment count 100001"},
      {"oversize", u32s({0, 0x0fffffff}), "frame of 2147483648 bytes"},
      {"garbage", garbage, "malformed frame"},
  };
  for (auto& c : cases) {
    auto bad = make("bad");
    std::promise<std::string> down;
    bad->on_peer_down([&](const peer_event& e) { down.set_value(e.reason); });
    ASSERT_TRUE(bad->connect(target.address, false)) << c.what;
    ASSERT_TRUE(endpoint_testing::send_raw(*bad, "robust", c.bytes)) << c.what;
    auto f = down.get_future();
    ASSERT_EQ(f.wait_for(3s), std::future_status::ready) << c.what << ": connection was not closed";
    auto r = run_ping(*good, {"robust", "echo", 20, 0, 64});
    ASSERT_TRUE(r) << c.what << ": the other peer lost service: " << r.err().to_string();
  }
  // Garbage from a stranger before any handshake.
  int fd = raw_connect(target.address);
  auto junk = u32s({3, 1, 1, 1, 1, 0, 0xdeadbeef, 0xdeadbeef, 1, 2, 3, 4, 5, 6});
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  EXPECT_TRUE(closed_by_peer(fd, 3s));
  ::close(fd);
  ASSERT_TRUE(run_ping(*good, {"robust", "echo", 20, 0, 64}));
  good.reset();
  EXPECT_EQ(target.proc->stop(), 0);
  const auto err = target.proc->stderr_text();
  for (auto& c : cases) EXPECT_NE(err.find(c.logged), std::string::npos) << c.what << " not logged:\n" << err;
  EXPECT_NE(err.find("refused connection from 127.0.0.1"), std::string::npos) << err;
  // The peer's bytes a reason quotes are escaped: the log stays text.
  for (unsigned char c : err)
    EXPECT_TRUE(c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) << int(c) << "\n" << err;
}

// 500 strangers in a row (garbage before the handshake): each is refused, but the log says so for
// the first few only, then counts the rest in one line (40k of them wrote 4.9 MB to master.log).
TEST_F(net_process, a_flood_of_refused_connections_is_logged_in_a_few_lines) {
  auto target = serve("flooded", token_file_);
  const int strangers = 500;
  auto junk = u32s({3, 1, 1, 1, 1, 0, 0xdeadbeef, 0xdeadbeef, 1, 2, 3, 4, 5, 6});
  for (int i = 0; i < strangers; ++i) {
    int fd = raw_connect(target.address);
    ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    ASSERT_TRUE(closed_by_peer(fd, 3s)) << "stranger " << i;
    ::close(fd);
  }
  auto good = make("good");
  ASSERT_TRUE(good->connect(target.address, false)) << "a peer with the token still gets in";
  good.reset();
  EXPECT_EQ(target.proc->stop(), 0);
  const auto err = target.proc->stderr_text();
  std::size_t refused = 0;
  for (auto at = err.find("refused connection from"); at != std::string::npos;
       at = err.find("refused connection from", at + 1))
    ++refused;
  EXPECT_GE(refused, 1u) << err;
  EXPECT_LE(refused, 20u) << "one line per stranger";
  EXPECT_NE(err.find("more like this in the last"), std::string::npos) << err;
  EXPECT_LT(err.size(), 20000u) << err.substr(0, 2000);
}

// `troupe status` connects as cli-<pid> for every poll: its comings and goings are not logged at
// info level (runner.log had a "peer cli-N up/down" pair per poll); a member's are.
TEST_F(net_process, client_peers_come_and_go_without_a_log_line) {
  auto target = serve("polled", token_file_);
  for (int i = 0; i < 3; ++i) {
    auto cli = make("cli-" + std::to_string(4242 + i));
    ASSERT_TRUE(cli->connect(target.address, false));
    ASSERT_TRUE(run_ping(*cli, {"polled", "echo", 2, 0, 8}));
  }
  auto member = make("worker-9");
  ASSERT_TRUE(member->connect(target.address, false));
  ASSERT_TRUE(run_ping(*member, {"polled", "echo", 2, 0, 8}));
  member.reset();
  EXPECT_EQ(target.proc->stop(), 0);
  const auto err = target.proc->stderr_text();
  EXPECT_NE(err.find("peer worker-9#0 up"), std::string::npos) << err;
  EXPECT_EQ(err.find("peer cli-"), std::string::npos) << err;
}

TEST_F(net_process, ping_command_prints_rtt_and_throughput_json) {
  auto target = serve("pingee", token_file_);
  child ping({"net", "ping", target.address, "--count", "200", "--bulk-frames", "20", "--token-file",
              token_file_.string()});
  auto line = ping.read_line(20s);
  EXPECT_NE(line.find("\"p50\":"), std::string::npos) << line << ping.stderr_text();
  EXPECT_NE(line.find("\"gbit_per_s\":"), std::string::npos) << line;
  EXPECT_NE(line.find("\"peer\":\"pingee#0\""), std::string::npos) << line;
}

}  // namespace
}  // namespace troupe
