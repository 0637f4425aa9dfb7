// How soon a SIGKILLed process's death can be noticed on the same host: its liveness beacon
// (a robust mutex, released by the kernel before the address-space teardown) next to its pidfd
// (readable once the process has exited) and waitpid. The victim holds `--mb` MiB of touched memory
// and a few threads, like a training worker. Prints JSON lines with median and p90 in microseconds.
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "troupe/collective/shm/liveness.hpp"

using namespace troupe::collective;
using clk = std::chrono::steady_clock;

namespace {

pid_t start_victim(const std::string& name, std::size_t mb) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::vector<char> mem(mb << 20);
    for (std::size_t i = 0; i < mem.size(); i += 4096) mem[i] = 1;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i)
      threads.emplace_back([] {
        for (;;) ::pause();
      });
    auto b = liveness_beacon::start(name);
    char ok = b ? 1 : 0;
    (void)::write(fds[1], &ok, 1);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char ok = 0;
  bool ready = ::read(fds[0], &ok, 1) == 1 && ok == 1;
  ::close(fds[0]);
  return ready ? pid : -1;
}

double us_since(clk::time_point t) {
  return std::chrono::duration<double, std::micro>(clk::now() - t).count();
}

struct stats {
  std::vector<double> v;
  double pct(double p) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t mb = 512;
  int rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mb")) mb = std::strtoul(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  }
  stats beacon, pidfd, reaped;
  for (int r = 0; r < rounds; ++r) {
    auto name = liveness_beacon::name_for("deathbench" + std::to_string(::getpid()), std::to_string(r));
    pid_t pid = start_victim(name, mb);
    if (pid <= 0) return std::fprintf(stderr, "death_notice_bench: victim did not start\n"), 1;
    auto w = liveness_watch::open(name);
    int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (!w || pfd < 0) return std::fprintf(stderr, "death_notice_bench: no beacon or pidfd\n"), 1;
    auto t0 = clk::now();
    ::kill(pid, SIGKILL);
    double tb = -1, tp = -1;
    while (tb < 0 || tp < 0) {  // busy-poll both: the first moment each reports the death
      if (tb < 0 && w->gone()) tb = us_since(t0);
      pollfd p{pfd, POLLIN, 0};
      if (tp < 0 && ::poll(&p, 1, 0) > 0) tp = us_since(t0);
    }
    ::waitpid(pid, nullptr, 0);
    reaped.v.push_back(us_since(t0));
    beacon.v.push_back(tb);
    pidfd.v.push_back(tp);
    ::close(pfd);
  }
  for (auto& [what, s] :
       {std::pair<const char*, stats*>{"beacon", &beacon}, {"pidfd", &pidfd}, {"waitpid", &reaped}})
    std::printf(
        "{\"bench\":\"death_notice\",\"signal\":\"%s\",\"victim_mb\":%zu,\"rounds\":%d,\"median_us\":%.1f,"
        "\"p90_us\":%.1f}\n",
        what, mb, rounds, s->pct(0.5), s->pct(0.9));
  return 0;
}
