// CPU of the worker's training loop (worker/worker_loop.cpp train_some, driven in 50 ms slices as
// the worker actor's ticks drive it) while it has no task and its lease request is on its way: a
// "master" endpoint on loopback whose dispenser never answers. Each run lasts less than the
// request's 2 s timeout, so the loop only waits for the reply. Prints one JSON line per run: the
// loop thread's CPU time per second of waiting and its passes per second.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ps_shard_host.hpp"
#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/rpc.hpp"
#include "worker/worker_state.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

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
  job::job_spec spec;
  node_identity who{node_id{"worker-0", 1}, cluster::node_role::worker, 0, "", "bench", "bench", 0};
  bench::endpoint_node node(who, spec, *net);
  auto rpc = must(wire::rpc_client::create(*net, "rpc", node.clock()), "rpc");
  auto& clk = node.clock();
  for (int r = 0; r < runs; ++r) {
    worker_state st;
    st.node = &node;
    st.leases = std::make_unique<task_lease_client>(node, *rpc);
    st.last_report = clk.now();
    const auto start = clk.now();
    const double cpu0 = thread_cpu_s();
    std::uint64_t passes = 0;
    while (clk.now() - start < window) {
      // One tick of the worker actor.
      const auto until = clk.now() + tick_budget;
      while (clk.now() < until && train_some(st, until)) ++passes;
    }
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
