// Node launch latency of the local launcher, against posix_spawn + waitpid in the same run.
//   cluster_launch_bench [iterations=200] [program=/bin/true]
// Prints one JSON line per measurement: median and p90 in microseconds of
//   - launch: launch() returning (the exec is confirmed), and
//   - launch_to_report: launch() to the exit report of a program that exits at once,
// and the same two for posix_spawn (spawn returning; spawn to waitpid returning).
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "troupe/cluster/local/launcher.hpp"

extern char** environ;

namespace {

using clk = std::chrono::steady_clock;

double us(clk::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void print(const char* what, const char* impl, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::printf(
      "{\"bench\":\"cluster_launch\",\"what\":\"%s\",\"impl\":\"%s\",\"n\":%zu,\"median_us\":%.1f,"
      "\"p90_us\":%.1f}\n",
      what, impl, v.size(), v[v.size() / 2], v[v.size() * 9 / 10]);
}

int run_launcher(int n, const std::string& program) {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t reported = 0;
  clk::time_point report_time;
  auto l = troupe::cluster::local_launcher::create(
      {[&](const troupe::cluster::node_handle&, const troupe::cluster::exit_status&) {
         std::lock_guard lock(mu);
         ++reported;
         report_time = clk::now();
         cv.notify_all();
       },
       troupe::cluster::resources{64, 1ull << 40, 0}});
  if (!l) {
    std::fprintf(stderr, "%s\n", l.err().to_string().c_str());
    return 1;
  }
  std::vector<double> launch, total;
  for (int i = 0; i < n; ++i) {
    troupe::cluster::node_spec s;
    s.id = {"worker-0", static_cast<std::uint64_t>(i)};
    s.program = program;
    s.argv = {program};
    auto t0 = clk::now();
    auto h = (*l)->launch(s);
    auto t1 = clk::now();
    if (!h) {
      std::fprintf(stderr, "%s\n", h.err().to_string().c_str());
      return 1;
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return reported == static_cast<std::uint64_t>(i + 1); });
    launch.push_back(us(t1 - t0));
    total.push_back(us(report_time - t0));
  }
  print("launch", "troupe_local_launcher", launch);
  print("launch_to_report", "troupe_local_launcher", total);
  return 0;
}

int run_posix_spawn(int n, const std::string& program) {
  std::vector<double> launch, total;
  for (int i = 0; i < n; ++i) {
    char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
    pid_t pid;
    auto t0 = clk::now();
    if (::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, environ) != 0) return 1;
    auto t1 = clk::now();
    int st;
    ::waitpid(pid, &st, 0);
    auto t2 = clk::now();
    launch.push_back(us(t1 - t0));
    total.push_back(us(t2 - t0));
  }
  print("launch", "posix_spawn", launch);
  print("launch_to_report", "posix_spawn", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200;
  std::string program = argc > 2 ? argv[2] : "/bin/true";
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s [iterations > 0] [program]\n", argv[0]);
    return 2;
  }
  if (int rc = run_posix_spawn(n, program)) return rc;
  return run_launcher(n, program);
}
