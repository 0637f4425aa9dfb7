// Ring allreduce bus bandwidth over shared-memory links between forked processes.
//   allreduce_bench [--ranks N] [--mb M] [--iters K] [--capacity-kb C] [--lanes H] [--lane-kb L]
//                   [--exchanges] [--chunk-kb K]
// Prints one JSON line per (ranks, size): algbw and busbw (nccl-tests convention:
// busbw = algbw * 2(n-1)/n, algbw = bytes / time), median over iterations. Each iteration checks
// the sums.
// --lanes H: each rank's link has H lanes (shm/link.hpp; a job's [job] ring_lanes): an exchange of
// at least 2 x L KiB is split over up to H threads per rank, each over rings of its own, so one
// rank's copies and sums use H cores.
// --exchanges: ring_allreduce's exchanges (step by step through the rings), not the link's fused
// pipeline that an allreduce of 1 MiB or more on one host runs (shm/link.hpp, all_on_host).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "troupe/collective/shm/link.hpp"

using namespace troupe::collective;

int main(int argc, char** argv) {
  int ranks = 2, iters = 20, lanes = 1;
  std::size_t lane_kb = 1024;
  bool exchanges = false;
  std::size_t chunk_kb = 0;
  // A job's rings ([job] ring_capacity_kb, 4 MiB). The best size depends on the machine's caches:
  // 1 MiB was 15-20% faster at 64 MB on the dev VM of 2026-11-22; on the one of 2026-11-27 4 MiB
  // was 1.8x faster at 64 MB and 1.1x at 1 MB (docs/benchmarks.md).
  std::size_t capacity_kb = 4096;
  double mb = 64;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (!std::strcmp(flag, "--exchanges")) {
      exchanges = true;
      continue;
    }
    if (i + 1 >= argc) break;
    const char* v = argv[++i];
    if (!std::strcmp(flag, "--ranks"))
      ranks = std::atoi(v);
    else if (!std::strcmp(flag, "--mb"))
      mb = std::atof(v);
    else if (!std::strcmp(flag, "--iters"))
      iters = std::atoi(v);
    else if (!std::strcmp(flag, "--capacity-kb"))
      capacity_kb = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--lanes"))
      lanes = std::atoi(v);
    else if (!std::strcmp(flag, "--lane-kb"))
      lane_kb = std::strtoul(v, nullptr, 10);
    else if (!std::strcmp(flag, "--chunk-kb"))
      chunk_kb = std::strtoul(v, nullptr, 10);
  }
  size_t n = static_cast<size_t>(mb * (1 << 20) / sizeof(float));
  std::string job = "bench" + std::to_string(::getpid());
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t p = ::fork();
    if (p == 0) {
      shm_link_options o;
      o.job = job;
      o.epoch = 1;
      o.rank = r;
      o.size = ranks;
      o.capacity = capacity_kb << 10;
      o.timeout = std::chrono::seconds(60);
      o.lanes = lanes;
      o.lane_min_bytes = lane_kb << 10;
      o.all_on_host = !exchanges;
      o.fused_chunk_bytes = chunk_kb << 10;
      auto link = shm_ring_link::connect(o);
      if (!link) {
        std::fprintf(stderr, "rank %d: %s\n", r, link.err().to_string().c_str());
        _exit(2);
      }
      // Values that differ by position and rank: a slice summed into the wrong place shows.
      auto value = [](std::size_t i, int rank) {
        return static_cast<float>(i % 251) + static_cast<float>(rank);
      };
      std::vector<float> data(n);
      auto fill = [&] {
        for (std::size_t i = 0; i < n; ++i) data[i] = value(i, r);
      };
      fill();
      std::vector<double> times;
      for (int it = 0; it < iters + 2; ++it) {
        // Every rank starts together: a zero-byte allreduce is a barrier.
        std::vector<float> bar(static_cast<size_t>(ranks), 0.f);
        (void)ring_allreduce(**link, r, ranks, bar, 1, 2 * it);
        auto t0 = std::chrono::steady_clock::now();
        auto res = ring_allreduce(**link, r, ranks, data, 1, 2 * it + 1);
        auto dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!res) {
          std::fprintf(stderr, "rank %d: %s\n", r, res.err().to_string().c_str());
          _exit(3);
        }
        for (std::size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < ranks; ++q) want += value(i, q);
          if (data[i] != want) {
            std::fprintf(stderr, "rank %d: element %zu is %g, not %g\n", r, i, data[i], want);
            _exit(4);
          }
        }
        if (it >= 2) times.push_back(dt);
        fill();
      }
      if (r == 0) {
        std::sort(times.begin(), times.end());
        double med = times[times.size() / 2];
        double bytes = static_cast<double>(n) * sizeof(float);
        double algbw = bytes / med / 1e9;
        double busbw = algbw * 2.0 * (ranks - 1) / ranks;
        std::printf(
            "{\"bench\":\"ring_allreduce_shm\",\"path\":\"%s\",\"capacity_kb\":%zu,\"chunk_kb\":%zu,"
            "\"lanes\":%d,\"lane_kb\":%"
            "zu,\"ranks\":%d,"
            "\"bytes\":%.0f,\"iters\":%d,\"median_s\":%.6f,"
            "\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f}\n",
            exchanges || n * sizeof(float) < o.fused_min_bytes ? "exchanges" : "fused", capacity_kb, chunk_kb,
            lanes, lane_kb, ranks, bytes, iters, med, algbw, busbw);
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
