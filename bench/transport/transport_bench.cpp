// Transport benchmark on loopback, peers measured in the same run:
//  - small-message round trip (p50/p99) between this process and a `troupe net serve` process,
//    next to a raw blocking TCP ping-pong of the same size between two processes (the floor);
//  - 1 MB-frame throughput to the same server, next to iperf3 on the same loopback.
// Prints JSON lines. Usage: transport_bench [--rounds N] [--count N] [--frames N]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "troupe/transport/diag.hpp"
#include "troupe/transport/endpoint.hpp"

extern char** environ;

namespace {
using steady = std::chrono::steady_clock;

std::string run_capture(std::vector<std::string> args, pid_t* bg = nullptr) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) return "";
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  if (bg) {  // background: return the first line only
    *bg = pid;
    while (out.find('\n') == std::string::npos) {
      auto n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    return out.substr(0, out.find('\n'));
  }
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

double iperf3_gbit(int port, int seconds) {
  pid_t srv = 0;
  std::vector<std::string> s = {"iperf3", "-s", "-1", "-p", std::to_string(port)};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (auto& a : s) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawnp(&srv, "iperf3", &fa, nullptr, argv.data(), environ) != 0) return 0;
  posix_spawn_file_actions_destroy(&fa);
  ::usleep(300'000);
  auto out = run_capture(
      {"iperf3", "-c", "127.0.0.1", "-p", std::to_string(port), "-t", std::to_string(seconds), "-J"});
  ::waitpid(srv, nullptr, 0);
  try {
    return nlohmann::json::parse(out)["end"]["sum_received"]["bits_per_second"].get<double>() / 1e9;
  } catch (const std::exception&) {
    return 0;
  }
}

// Raw TCP ping-pong of `size` bytes with a forked echo process: the floor under any transport.
std::pair<double, double> raw_tcp_rtt_us(std::size_t size, int count) {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::listen(ls, 1);
  socklen_t len = sizeof sa;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  std::vector<char> buf(size);
  auto full = [&](int fd, bool rd) {
    std::size_t done = 0;
    while (done < size) {
      auto n = rd ? ::read(fd, buf.data() + done, size - done) : ::write(fd, buf.data() + done, size - done);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  };
  pid_t child = ::fork();
  if (child == 0) {
    int c = ::accept(ls, nullptr, nullptr);
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (full(c, true) && full(c, false)) {
    }
    ::_exit(0);
  }
  ::close(ls);
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(c, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> rtts;
  for (int i = 0; i < count + 1000; ++i) {
    auto t0 = steady::now();
    if (!full(c, false) || !full(c, true)) break;
    if (i >= 1000) rtts.push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
  }
  ::close(c);
  ::waitpid(child, nullptr, 0);
  std::sort(rtts.begin(), rtts.end());
  if (rtts.empty()) return {0, 0};
  return {rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100]};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, count = 20000, frames = 3000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--count") count = std::atoi(argv[i + 1]);
    if (k == "--frames") frames = std::atoi(argv[i + 1]);
  }
  spdlog::set_level(spdlog::level::warn);
  ::setenv("TROUPE_CLUSTER_TOKEN", "bench-token", 1);
  pid_t server = 0;
  auto line =
      run_capture({TROUPE_BIN, "--log-level", "warn", "net", "serve", "--name", "bench-server"}, &server);
  if (line.rfind("listening ", 0) != 0) {
    std::fprintf(stderr, "transport_bench: server did not start: '%s'\n", line.c_str());
    return 1;
  }
  troupe::transport_config cfg;
  cfg.token = "bench-token";
  auto ep = troupe::endpoint::create(troupe::node_id{"bench-client", 0}, cfg);
  auto peer = ep ? (*ep)->connect(line.substr(10), false) : troupe::expected<troupe::node_id>(ep.err());
  if (!peer) {
    std::fprintf(stderr, "transport_bench: %s\n", peer.err().to_string().c_str());
    ::kill(server, SIGTERM);
    return 1;
  }
  std::vector<double> p50s, p99s, raw50, raw99, tput, iperf;
  for (int r = 0; r < rounds; ++r) {
    auto rtt = troupe::run_ping(**ep, {peer->name, "echo", static_cast<std::size_t>(count), 1000, 32});
    if (rtt) p50s.push_back(rtt->p50_us), p99s.push_back(rtt->p99_us);
    auto [r50, r99] = raw_tcp_rtt_us(64, count);  // a 32-byte ping is a 64-byte frame on the wire
    raw50.push_back(r50), raw99.push_back(r99);
    troupe::bulk_options b;
    b.node = peer->name;
    b.frames = static_cast<std::size_t>(frames);
    auto bulk = troupe::run_bulk(**ep, b);
    if (bulk) tput.push_back(bulk->gbit_per_s);
    iperf.push_back(iperf3_gbit(20000 + (::getpid() % 20000), 2));
  }
  const double ip = median(iperf), tp = median(tput);
  nlohmann::json rtt = {{"bench", "transport_rtt"},
                        {"payload_bytes", 32},
                        {"count", count},
                        {"rounds", rounds},
                        {"p50_us", median(p50s)},
                        {"p99_us", median(p99s)},
                        {"peer", "raw_tcp_pingpong_64B"},
                        {"peer_p50_us", median(raw50)},
                        {"peer_p99_us", median(raw99)},
                        {"ratio_p50", median(raw50) > 0 ? median(p50s) / median(raw50) : 0}};
  nlohmann::json thr = {{"bench", "transport_throughput"},
                        {"frame_bytes", 1 << 20},
                        {"frames", frames},
                        {"rounds", rounds},
                        {"gbit_per_s", tp},
                        {"all_gbit_per_s", tput},
                        {"peer", "iperf3"},
                        {"peer_gbit_per_s", ip},
                        {"peer_all_gbit_per_s", iperf},
                        {"ratio", ip > 0 ? tp / ip : 0}};
  std::printf("%s\n%s\n", rtt.dump().c_str(), thr.dump().c_str());
  ep->reset();
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  return 0;
}
