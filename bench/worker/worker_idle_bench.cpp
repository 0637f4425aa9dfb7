// CPU of the worker's training loop (train_some, driven in 50 ms slices as the worker actor's ticks
// drive it: troupe/actors/testing/idle_worker.hpp) while it has no task and its lease request is on its way:
// a "master" endpoint on loopback whose dispenser never answers. Each run lasts less than the request's 2 s
// timeout, so the loop only waits for the reply. Prints one JSON line per run: the loop thread's CPU time per
// second of waiting and its passes per second.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "troupe/actors/testing/idle_worker.hpp"
#include "troupe/transport/endpoint.hpp"

namespace {

using namespace troupe;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <typename T>
T must(expected<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.err().to_string().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  const auto window = std::chrono::milliseconds(1500);
  transport_config cfg;
  cfg.token = "worker-idle-bench";
  auto master = must(endpoint::create(node_id{"master", 1}, cfg), "master endpoint");
  if (!master->register_name("dispenser", [](const message&) {})) return 1;  // never answers
  auto addr = must(master->listen("127.0.0.1", 0), "listen");
  auto net = must(endpoint::create(node_id{"worker-0", 1}, cfg), "worker endpoint");
  must(net->connect(addr, false), "connect");
  auto worker = must(actors::testing::idle_worker::create(*net, node_id{"worker-0", 1}), "worker");
  auto& clk = worker->clock();
  for (int r = 0; r < runs; ++r) {
    const auto start = clk.now();
    const double cpu0 = thread_cpu_s();
    const std::uint64_t passes = worker->run(window);
    const double wall = std::chrono::duration<double>(clk.now() - start).count();
    const double cpu = thread_cpu_s() - cpu0;
    std::printf(
        "{\"bench\":\"worker_idle\",\"run\":%d,\"wall_s\":%.3f,\"cpu_ms_per_s\":%.3f,\"passes_per_s\":%.1f}"
        "\n",
        r, wall, cpu * 1e3 / wall, static_cast<double>(passes) / wall);
    std::fflush(stdout);
  }
  return 0;
}
