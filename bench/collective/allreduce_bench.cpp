// Ring allreduce bus bandwidth over shared-memory links between forked processes.
//   allreduce_bench [--ranks N] [--mb M] [--iters K] [--capacity-kb C] [--channels H]
// Prints one JSON line per (ranks, size): algbw and busbw (nccl-tests convention:
// busbw = algbw * 2(n-1)/n, algbw = bytes / time), median over iterations.
// --channels H (a prototype for large messages, not what a job does yet): each rank splits the
// data into H slices and reduces them on H threads at once, each over rings of its own (NCCL's
// channels), so one rank's copies and sums use H cores. Each iteration checks the sums.
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

#include "troupe/collective/shm/link.hpp"

using namespace troupe::collective;

int main(int argc, char** argv) {
  int ranks = 2, iters = 20, channels = 1;
  // A job's rings ([job] ring_capacity_kb, 4 MiB). The best size depends on the machine's caches:
  // 1 MiB was 15-20% faster at 64 MB on the dev VM of 2026-11-22; on the one of 2026-11-27 4 MiB
  // was 1.8x faster at 64 MB and 1.1x at 1 MB (docs/benchmarks.md).
  std::size_t capacity_kb = 4096;
  double mb = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks"))
      ranks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mb"))
      mb = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters"))
      iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--capacity-kb"))
      capacity_kb = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--channels"))
      channels = std::max(1, std::atoi(argv[i + 1]));
  }
  size_t n = static_cast<size_t>(mb * (1 << 20) / sizeof(float));
  std::string job = "bench" + std::to_string(::getpid());
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t p = ::fork();
    if (p == 0) {
      std::vector<std::unique_ptr<shm_ring_link>> links;
      for (int c = 0; c < channels; ++c) {
        shm_link_options o;
        o.job = channels == 1 ? job : job + "c" + std::to_string(c);
        o.epoch = 1;
        o.rank = r;
        o.size = ranks;
        o.capacity = capacity_kb << 10;
        o.timeout = std::chrono::seconds(60);
        auto link = shm_ring_link::connect(o);
        if (!link) {
          std::fprintf(stderr, "rank %d: %s\n", r, link.err().to_string().c_str());
          _exit(2);
        }
        links.push_back(std::move(*link));
      }
      std::vector<float> data(n, 1.0f);
      std::vector<double> times;
      for (int it = 0; it < iters + 2; ++it) {
        // Every rank starts together: a zero-byte allreduce is a barrier.
        std::vector<float> bar(static_cast<size_t>(ranks), 0.f);
        (void)ring_allreduce(*links[0], r, ranks, bar, 1, 2 * it);
        auto t0 = std::chrono::steady_clock::now();
        std::vector<troupe::expected<void>> res(static_cast<std::size_t>(channels));
        auto slice = [&](int c) {
          auto [b, e] = segment_bounds(n, channels, c);
          res[static_cast<std::size_t>(c)] = ring_allreduce(*links[static_cast<std::size_t>(c)], r, ranks,
                                                            std::span(data).subspan(b, e - b), 1, 2 * it + 1);
        };
        std::vector<std::thread> helpers;
        for (int c = 1; c < channels; ++c) helpers.emplace_back(slice, c);
        slice(0);
        for (auto& h : helpers) h.join();
        auto dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (const auto& x : res)
          if (!x) {
            std::fprintf(stderr, "rank %d: %s\n", r, x.err().to_string().c_str());
            _exit(3);
          }
        if (std::any_of(data.begin(), data.end(), [&](float v) { return v != static_cast<float>(ranks); })) {
          std::fprintf(stderr, "rank %d: a sum is not %d\n", r, ranks);
          _exit(4);
        }
        if (it >= 2) times.push_back(dt);
        std::fill(data.begin(), data.end(), 1.0f);
      }
      if (r == 0) {
        std::sort(times.begin(), times.end());
        double med = times[times.size() / 2];
        double bytes = static_cast<double>(n) * sizeof(float);
        double algbw = bytes / med / 1e9;
        double busbw = algbw * 2.0 * (ranks - 1) / ranks;
        std::printf(
            "{\"bench\":\"ring_allreduce_shm\",\"capacity_kb\":%zu,\"channels\":%d,\"ranks\":%d,"
            "\"bytes\":%.0f,\"iters\":%d,\"median_s\":%.6f,"
            "\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f}\n",
            capacity_kb, channels, ranks, bytes, iters, med, algbw, busbw);
        std::fflush(stdout);
      }
      _exit(0);
    }
    pids.push_back(p);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) worst = 1;
  }
  return worst;
}
