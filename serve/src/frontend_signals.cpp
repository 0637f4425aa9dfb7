// The front end's waits on signals: while its first model loads (a starting server is stopped too),
// while it serves (SIGHUP reloads), and while it drains after SIGTERM.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <utility>

#include "frontend.hpp"

namespace troupe::serve {

bool frontend::first_generation_up() {
  std::unique_lock lk(mu_);
  auto& first = gens_.begin()->second;
  const auto over = [&] { return stopping_ || first.state != gen_state::staging || !first.failure.empty(); };
  // A starting server is stopped too: SIGINT and SIGTERM are looked for meanwhile (they waited for
  // the replicas, up to load_timeout_ms: `troupe serve stop` gave up after 120 s).
  while (!troupe::wait_until(clock_, wake_, lk, clock_.now() + std::chrono::milliseconds(50), over)) {
    lk.unlock();
    const int sig = signals_->poll();
    lk.lock();
    hup_while_starting_ |= sig == SIGHUP;  // kept for wait_for_signals (it stayed pending before)
    if (sig != SIGINT && sig != SIGTERM) continue;
    spdlog::info("serve: stopping ({}) while the model is loading", sig == SIGINT ? "SIGINT" : "SIGTERM");
    stopping_ = true;
  }
  if (first.state != gen_state::staging) return true;
  if (stopping_) return false;  // a signal: the caller says "stopped"
  std::string why = first.failure;
  lk.unlock();
  // The CLI's error line, as frontend.cpp's refused() writes it (not a log line).
  std::fprintf(stderr, "troupe: error: serve: the model could not be served: %s\n", why.c_str());
  return false;
}

// [serve] drain_ms: after SIGTERM, /v2/health/ready answers 503 while requests are still served, so
// that a load balancer takes the server out of rotation before it stops taking requests (readiness
// stayed 200 to the end: requests sent in the stop's last moments got 503s or a closed connection).
// A second SIGINT or SIGTERM stops at once.
void frontend::drain() {
  if (cfg_.drain.count() == 0) return;
  draining_ = true;
  write_state(false);  // server.json says draining at once (troupe serve status)
  spdlog::info("serve: draining for {}: readiness 503, requests still served (a second signal stops now)",
               ms_text(cfg_.drain));
  const auto until = clock_.now() + cfg_.drain;
  for (auto now = clock_.now(); now < until; now = clock_.now()) {
    if (const int sig = signals_->poll(); sig == SIGINT || sig == SIGTERM) {
      spdlog::info("serve: a second signal: stopping now");
      return;
    } else if (sig == SIGHUP) {
      spdlog::info("serve: SIGHUP while draining: no reload (the server is stopping)");
    }
    clock_.sleep_for(std::min<clock::duration>(std::chrono::milliseconds(50), until - now));
  }
}

void frontend::on_sighup() {
  std::lock_guard lk(mu_);
  if (!cfg_.watch.empty()) {
    next_watch_ = clock_.now();
    hup_look_ = true;
    spdlog::info("serve: SIGHUP: looking under {} for a newer model", cfg_.watch);
  } else {
    reloads_.push_back({served_dir(), std::nullopt, "SIGHUP"});
  }
  wake_.notify_all();
}

void frontend::wait_for_signals() {
  if (std::exchange(hup_while_starting_, false)) on_sighup();
  for (;;) {
    const int sig = signals_->wait();
    if (sig == SIGHUP) {
      on_sighup();
      continue;
    }
    spdlog::info("serve: stopping ({})", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return;
  }
}

}  // namespace troupe::serve
