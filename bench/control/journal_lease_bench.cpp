// The dispenser's lease path on the task journal, before and after issue 26's one-transaction
// lease, without the transport: C client threads each lease a task (naming the one it holds), then
// complete it, against one dispenser thread that serves the requests as the dispenser actor does
// (it is the journal's only caller). The journal is on disk with fsync, as in a job.
//
// Built twice: journal_lease_bench (this tree: every report and request queued while the previous
// batch committed goes into one transaction, task_journal::apply) and journal_lease_bench_9a7d10d
// (the journal of commit 9a7d10d, one message at a time: a report is one write transaction, a lease
// two: requeue_holder_except, which scans every DOING task, then lease). Prints one JSON line.
//
// Usage: journal_lease_bench [--clients C] [--seconds S] [--dir DIR]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "troupe/storage/task_journal.hpp"

using namespace troupe;
using namespace troupe::storage;
using clk = std::chrono::steady_clock;

namespace {

struct request {
  bool report = false;  // complete `keep[0]` (attempt) instead of leasing
  std::uint32_t attempt = 0;
  std::string holder;
  std::vector<std::uint64_t> keep;
  std::optional<task> leased;
  bool answered = false;
};

struct server {
  std::mutex mu;
  std::condition_variable cv, answered;
  std::deque<request*> queue;
  bool stop = false;
};

void serve(task_journal& j, server& s) {
  for (;;) {
    std::vector<request*> batch;
    {
      std::unique_lock l(s.mu);
      s.cv.wait(l, [&] { return s.stop || !s.queue.empty(); });
      if (s.stop) return;
#ifdef TROUPE_BASE_JOURNAL
      batch.push_back(s.queue.front());  // the actor handled one message at a time
      s.queue.pop_front();
#else
      batch.assign(s.queue.begin(), s.queue.end());  // what queued up while the last batch committed
      s.queue.clear();
#endif
    }
#ifdef TROUPE_BASE_JOURNAL
    // One message at a time: a report is one transaction (complete), a lease two.
    for (auto* r : batch) {
      if (r->report) {
        (void)j.complete(r->keep[0], r->holder, r->attempt);
        continue;
      }
      (void)j.requeue_holder_except(r->holder, r->keep);
      auto t = j.lease(r->holder, 1'000'000'000'000);
      if (t) r->leased = *t;
    }
#else
    // Every report and lease queued since the last commit, in one transaction.
    journal_batch jb;
    std::vector<request*> asks;
    for (auto* r : batch)
      if (r->report) {
        jb.reports.push_back({r->keep[0], r->holder, r->attempt, false, {}});
      } else {
        jb.leases.push_back({r->holder, 1'000'000'000'000, r->keep});
        asks.push_back(r);
      }
    auto out = j.apply(jb);
    for (std::size_t i = 0; out && i < asks.size(); ++i) asks[i]->leased = out->leases[i].leased;
#endif
    {
      std::lock_guard l(s.mu);
      for (auto* r : batch) r->answered = true;
    }
    s.answered.notify_all();
  }
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 64;
  double seconds = 5;
  std::string dir = "/tmp/journal-lease-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--clients")
      clients = std::atoi(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else
      return std::fprintf(stderr, "journal_lease_bench: unknown argument '%s'\n", a.c_str()), 2;
  }
  if (clients < 1) return std::fprintf(stderr, "journal_lease_bench: --clients must be >= 1\n"), 2;
  std::filesystem::remove_all(dir);
  journal_options o;
  o.dataset = "bench";
  o.record_count = 2'000'000;
  o.records_per_task = 1;
  auto j = task_journal::open_or_create(dir, o);
  if (!j) return std::fprintf(stderr, "journal_lease_bench: %s\n", j.err().to_string().c_str()), 1;
  server s;
  std::thread srv([&] { serve(*j, s); });
  std::atomic<bool> run{true}, measuring{false};
  std::atomic<std::uint64_t> leases{0};
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(clients));
  std::vector<std::thread> cs;
  for (int c = 0; c < clients; ++c)
    cs.emplace_back([&, c] {
      std::string holder = "worker-";
      holder += std::to_string(c);
      holder += "#1";
      std::vector<std::uint64_t> keep;
      std::uint32_t attempt = 0;
      auto ask = [&](request& r) {
        {
          std::lock_guard l(s.mu);
          s.queue.push_back(&r);
        }
        s.cv.notify_one();
        std::unique_lock l(s.mu);
        s.answered.wait(l, [&] { return r.answered; });
      };
      while (run.load()) {
        request r{false, 0, holder, keep, std::nullopt, false};
        auto t0 = clk::now();
        ask(r);
        double ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
        if (!r.leased) break;
        if (measuring.load()) {
          lat[static_cast<std::size_t>(c)].push_back(ms);
          leases.fetch_add(1);
        }
        // The worker reports the task it held (one transaction, before and after) and keeps the new one.
        if (!keep.empty()) {
          request rep{true, attempt, holder, keep, std::nullopt, false};
          ask(rep);
        }
        keep = {r.leased->id};
        attempt = r.leased->attempt;
      }
    });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm-up, not measured
  auto t0 = clk::now();
  measuring = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured window
  measuring = false;
  double secs = std::chrono::duration<double>(clk::now() - t0).count();
  run = false;
  for (auto& t : cs) t.join();
  {
    std::lock_guard l(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  srv.join();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty()
               ? 0.0
               : all[std::min(all.size() - 1, static_cast<std::size_t>(p * static_cast<double>(all.size())))];
  };
#ifdef TROUPE_BASE_JOURNAL
  const char* which = "9a7d10d";
#else
  const char* which = "one-transaction";
#endif
  std::printf(
      "{\"journal\":\"%s\",\"clients\":%d,\"leases\":%llu,\"leases_per_s\":%.0f,\"lease_p50_ms\":%.3f,"
      "\"lease_p99_ms\":%.3f,\"write_transactions\":%llu}\n",
      which, clients, static_cast<unsigned long long>(leases.load()),
      static_cast<double>(leases.load()) / secs, pct(0.5), pct(0.99),
#ifdef TROUPE_BASE_JOURNAL
      0ull
#else
      static_cast<unsigned long long>(j->write_transactions())
#endif
  );
  std::filesystem::remove_all(dir);
  return 0;
}
