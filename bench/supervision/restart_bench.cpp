// Restart latency: from the moment a supervised child is told to fail until its replacement is
// resolvable by name again, on CAF's threaded scheduler. The peer is the least a CAF program can
// do: a bare actor that monitors its child and spawns a new one on down_msg (no registry, no
// policy). Prints one JSON line per run.
//
//   supervision_bench [--n 2000] [--threads 2]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "troupe/supervision/caf_errors.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/supervision/supervisor.hpp"

namespace sv = troupe::supervision;
using clk = std::chrono::steady_clock;
using fail_atom = caf::atom_constant<caf::atom("b_fail")>;

namespace {

// Fails without an exception (CAF prints every unhandled one).
caf::behavior victim(caf::event_based_actor* self) {
  return {[self](fail_atom) { self->quit(caf::sec::runtime_error); }};
}

struct slot {
  std::atomic<std::uint64_t> generation{0};
  caf::actor handle;  // written by the publisher before generation is bumped
};

// Spins (with yields) until the slot's generation passes `gen`.
void await_gen(const slot& s, std::uint64_t gen) {
  while (s.generation.load(std::memory_order_acquire) <= gen) std::this_thread::yield();
}

// Stops `a` and waits until it is gone (it references this scope's registry and slot).
void stop_and_wait(caf::actor_system& sys, const caf::actor& a, caf::error reason) {
  caf::scoped_actor self{sys};
  self->monitor(a);
  self->send_exit(a, std::move(reason));
  self->receive([](caf::down_msg&) {});
}

// Once the first victim is up: `n` times, fails the current victim and times until its
// replacement is published (microseconds each).
std::vector<double> time_restarts(const slot& s, int n) {
  await_gen(s, 0);
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    auto gen = s.generation.load(std::memory_order_acquire);
    auto target = s.handle;
    auto t0 = clk::now();
    caf::anon_send(target, fail_atom::value);
    await_gen(s, gen);
    us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
  }
  return us;
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * (v.size() - 1))];
}

std::vector<double> bench_supervisor(caf::actor_system& sys, int n) {
  sv::name_registry names;
  slot s;
  auto sub = names.subscribe("w", [&](const std::string&, const caf::actor& a) {
    if (!a) return;
    s.handle = a;
    s.generation.fetch_add(1, std::memory_order_release);
  });
  sv::supervisor_config cfg;
  cfg.max_restarts = 1'000'000;
  cfg.backoff.base = std::chrono::nanoseconds(0);
  cfg.backoff.max = std::chrono::nanoseconds(0);
  sv::child_spec spec;
  spec.name = "w";
  spec.start = [](sv::spawn_context& ctx) { return ctx.system.spawn(victim); };
  auto sup = sv::spawn_supervisor(sys, names, cfg, {spec});
  auto us = time_restarts(s, n);
  stop_and_wait(sys, sup, caf::exit_reason::user_shutdown);
  return us;
}

// The peer: monitor + respawn, publishing the new handle the same way.
std::vector<double> bench_bare(caf::actor_system& sys, int n) {
  slot s;
  auto respawner = sys.spawn([&s](caf::event_based_actor* self) -> caf::behavior {
    auto start = [self, &s] {
      auto a = self->spawn(victim);
      self->monitor(a);
      s.handle = a;
      s.generation.fetch_add(1, std::memory_order_release);
    };
    start();
    self->set_down_handler([start](caf::down_msg&) { start(); });
    return {[](int) {}};
  });
  auto us = time_restarts(s, n);
  stop_and_wait(sys, respawner, caf::exit_reason::kill);
  caf::anon_send_exit(s.handle, caf::exit_reason::kill);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2000;
  int threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--n") == 0) n = std::max(10, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::max(1, std::atoi(argv[i + 1]));
  }
  spdlog::set_level(spdlog::level::err);  // a warning per restart would dominate
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", threads);
  sv::add_supervision_error_category(cfg);
  caf::actor_system sys{cfg};
  auto bare = bench_bare(sys, n);
  auto sup = bench_supervisor(sys, n);
  std::printf(
      "{\"bench\":\"supervisor_restart_latency\",\"n\":%d,\"threads\":%d,"
      "\"troupe_p50_us\":%.1f,\"troupe_p99_us\":%.1f,\"peer\":\"caf_monitor_respawn\","
      "\"peer_p50_us\":%.1f,\"peer_p99_us\":%.1f}\n",
      n, threads, pct(sup, 0.5), pct(sup, 0.99), pct(bare, 0.5), pct(bare, 0.99));
  return 0;
}
