// One rank of a ring allreduce over TCP links, for runs across hosts (scripts/hosts.sh): every
// rank is started on its own host with its listen address and the next rank's address.
//   allreduce_tcp_rank --rank R --size N --listen HOST:PORT --next HOST:PORT [--mb M] [--iters K]
//                      [--heartbeat-ms H] [--timeout-ms T] [--send-thread-kb K] [--until-error]
// Rank 0 prints one JSON line: median algbw and busbw (nccl-tests convention). With
// --until-error each rank runs allreduces until one fails (a cut link, a dead neighbour) and
// prints {"error": ..., "ms_to_fail": ...} for that operation; exit 0 when it failed cleanly.
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "troupe/collective/tcp/link.hpp"

using namespace troupe::collective;
using steady = std::chrono::steady_clock;

namespace {

// This process so far: CPU seconds (user + system), voluntary context switches, and seconds its
// threads were runnable but waited for a core (/proc/self/task/*/schedstat; 0 where absent).
struct cpu_use {
  double cpu_s = 0, runq_s = 0;
  long vcsw = 0;
};

cpu_use cpu_used() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  cpu_use c{sec(u.ru_utime) + sec(u.ru_stime), 0, u.ru_nvcsw};
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        unsigned long long run = 0, wait = 0;
        if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) c.runq_s += static_cast<double>(wait) / 1e9;
        std::fclose(f);
      }
    }
    ::closedir(d);
  }
  return c;
}

struct args {
  int rank = 0, size = 2, iters = 20;
  double mb = 64;
  std::string listen, next;
  long heartbeat_ms = 3000, timeout_ms = 60000;
  long send_thread_kb = -1;  // the link's default unless given; 0: exchanges on one thread
  bool until_error = false;
};

bool parse(int argc, char** argv, args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--until-error") {
      a.until_error = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (k == "--rank")
      a.rank = std::atoi(v);
    else if (k == "--size")
      a.size = std::atoi(v);
    else if (k == "--iters")
      a.iters = std::atoi(v);
    else if (k == "--mb")
      a.mb = std::atof(v);
    else if (k == "--listen")
      a.listen = v;
    else if (k == "--next")
      a.next = v;
    else if (k == "--heartbeat-ms")
      a.heartbeat_ms = std::atol(v);
    else if (k == "--timeout-ms")
      a.timeout_ms = std::atol(v);
    else if (k == "--send-thread-kb")
      a.send_thread_kb = std::atol(v);
    else
      return false;
  }
  return !a.listen.empty() && !a.next.empty() && a.size >= 2 && a.rank >= 0 && a.rank < a.size && a.iters > 0;
}

int until_error(tcp_ring_link& link, const args& a, std::size_t n) {
  std::vector<float> data(n, 1.0f);
  for (std::uint64_t op = 1;; ++op) {
    auto t0 = steady::now();
    auto res = ring_allreduce(link, a.rank, a.size, data, 1, op);
    if (!res) {
      auto ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
      std::printf("{\"rank\":%d,\"ops_before\":%llu,\"error\":\"%s\",\"ms_to_fail\":%.1f}\n", a.rank,
                  static_cast<unsigned long long>(op - 1), res.err().to_string().c_str(), ms);
      return 0;
    }
    std::fill(data.begin(), data.end(), 1.0f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(
        stderr,
        "usage: allreduce_tcp_rank --rank R --size N --listen HOST:PORT --next HOST:PORT "
        "[--mb M] [--iters K] [--heartbeat-ms H] [--timeout-ms T] [--send-thread-kb K] [--until-error]\n");
    return 2;
  }
  auto colon = a.listen.rfind(':');
  auto listener = tcp_listener::open(a.listen.substr(0, colon),
                                     static_cast<std::uint16_t>(std::atoi(a.listen.c_str() + colon + 1)));
  if (!listener) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, listener.err().to_string().c_str());
    return 1;
  }
  tcp_link_options o;
  o.epoch = 1;
  o.rank = a.rank;
  o.size = a.size;
  o.next_address = a.next;
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  o.heartbeat_timeout = std::chrono::milliseconds(a.heartbeat_ms);
  if (a.send_thread_kb >= 0) o.send_thread_bytes = static_cast<std::size_t>(a.send_thread_kb) << 10;
  auto link = tcp_ring_link::connect(o, **listener);
  if (!link) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, link.err().to_string().c_str());
    return 1;
  }
  auto n = static_cast<std::size_t>(a.mb * (1 << 20) / sizeof(float));
  if (a.until_error) {
    std::fprintf(stderr, "rank %d linked\n", a.rank);
    return until_error(**link, a, n);
  }
  std::vector<float> data(n, 1.0f), bar(static_cast<std::size_t>(a.size));
  std::vector<double> times;
  auto cpu0 = cpu_used();
  for (int it = 0; it < a.iters + 2; ++it) {
    if (it == 2) cpu0 = cpu_used();
    (void)ring_allreduce(**link, a.rank, a.size, bar, 1, 2 * it);  // all ranks start together
    auto t0 = steady::now();
    auto res = ring_allreduce(**link, a.rank, a.size, data, 1, 2 * it + 1);
    double dt = std::chrono::duration<double>(steady::now() - t0).count();
    if (!res) {
      std::fprintf(stderr, "rank %d: %s\n", a.rank, res.err().to_string().c_str());
      return 3;
    }
    if (data[0] != static_cast<float>(a.size)) {
      std::fprintf(stderr, "rank %d: wrong sum %g\n", a.rank, static_cast<double>(data[0]));
      return 4;
    }
    if (it >= 2) times.push_back(dt);
    std::fill(data.begin(), data.end(), 1.0f);
  }
  auto cpu1 = cpu_used();
  if (a.rank == 0) {
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2], bytes = static_cast<double>(n) * sizeof(float);
    double algbw = bytes / med / 1e9;
    std::printf(
        "{\"bench\":\"ring_allreduce_tcp\",\"ranks\":%d,\"bytes\":%.0f,\"iters\":%d,\"median_s\":%.6f,"
        "\"min_s\":%.6f,\"max_s\":%.6f,\"cpu_s_per_op\":%.6f,\"runq_s_per_op\":%.6f,\"vcsw_per_op\":%.0f,"
        "\"algbw_GBps\":%.3f,"
        "\"busbw_GBps\":%.3f}\n",
        a.size, bytes, a.iters, med, times.front(), times.back(), (cpu1.cpu_s - cpu0.cpu_s) / a.iters,
        (cpu1.runq_s - cpu0.runq_s) / a.iters, static_cast<double>(cpu1.vcsw - cpu0.vcsw) / a.iters, algbw,
        algbw * 2.0 * (a.size - 1) / a.size);
  }
  return 0;
}
