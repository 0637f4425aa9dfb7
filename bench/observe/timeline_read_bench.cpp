// What reading a long job's timeline costs (docs/benchmarks.md): a synthetic events.jsonl of
// --hours of a job (metrics and node_stats events at the pace the master and the nodes write them:
// observe::metrics_pace and node_stats_pace, or with --pace fixed as they were written before
// 2026-11-30, a metrics event a second and a node_stats event per node every 5 s; a membership
// event and a batch choice now and then) written with observe::event_log, then read --reps times
// each way, the median printed as one JSON line per way (with the file's size and lines):
//   all      every line parsed (what `troupe status` did before 2026-11-29)
//   notable  every line but metrics and node_stats parsed (`troupe status` now)
//   batch    the batch and batch_measured lines parsed (a master starting: batch_choices.hpp)
//
//   timeline_read_bench [--hours 24] [--nodes 3] [--reps 5] [--dir /tmp] [--pace thinning|fixed]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "troupe/observe/job_events.hpp"
#include "troupe/observe/timeline.hpp"

namespace {

using namespace troupe::observe;

job_event event(const char* kind, std::uint64_t t_ms) {
  job_event e;
  e.kind = kind;
  e.t_ms = t_ms;
  return e;
}

// Whether an event of `pace` is due in second `s` of the job (`fixed`: at the pace's first period).
bool due(const report_pace& pace, int s, bool fixed) {
  const auto period = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(fixed ? pace.first : pace.at(std::chrono::seconds(s)))
          .count());
  return s % period == 0;
}

// A metrics event of second `s` (with the goodput fields).
job_event metrics_event(std::uint64_t t, int s, int nodes) {
  auto m = event("metrics", t);
  m.fields = {{"epoch", std::int64_t{8}},
              {"workers_alive", std::int64_t{nodes - 1}},
              {"samples", std::int64_t{1000} * s},
              {"samples_per_s", 16000.5},
              {"restarts", std::int64_t{0}},
              {"tasks_todo", std::int64_t{100}},
              {"tasks_doing", std::int64_t{2}},
              {"tasks_done", std::int64_t{s / 10}},
              {"tasks_failed", std::int64_t{0}},
              {"tasks_requeued", std::int64_t{0}},
              {"loss", 0.4123456},
              {"noise_scale", 377.28},
              {"batch", 214.0},
              {"goodput", 15000.5 + s},
              {"lr_factor", 1.0123},
              {"progress", 441.5 + s}};
  return m;
}

// Metrics and node_stats per node at their pace, a join every 10 minutes,
// a batch choice and its measurement every hour.
void write_timeline(const std::string& path, int hours, int nodes, bool fixed) {
  auto log = event_log::open(path);
  if (!log) std::exit((std::fprintf(stderr, "%s\n", log.err().to_string().c_str()), 2));
  std::uint64_t t = 1'795'000'000'000;
  const int seconds = hours * 3600;
  for (int s = 0; s < seconds; ++s, t += 1000) {
    if (due(metrics_pace, s, fixed)) (void)(*log)->append(metrics_event(t, s, nodes));
    if (due(node_stats_pace, s, fixed))
      for (int n = 0; n < nodes; ++n) {
        auto st = event("node_stats", t);
        st.fields = {{"node", "worker-" + std::to_string(n) + "#0"},
                     {"cpu_percent", 97.25},
                     {"rss_bytes", std::int64_t{204881920}}};
        (void)(*log)->append(std::move(st));
      }
    if (s % 600 == 0) {
      auto j = event("join", t);
      j.fields = {{"node", "worker-9#" + std::to_string(s / 600)}, {"epoch", std::int64_t{s / 600}}};
      (void)(*log)->append(std::move(j));
    }
    if (s % 3600 == 1800) {
      const std::int64_t c = s / 3600 + 1;
      auto b = event("batch", t);
      b.fields = {{"choice", c},
                  {"batch", std::int64_t{214}},
                  {"replicas", std::int64_t{2}},
                  {"at_progress", 441.5 + s}};
      (void)(*log)->append(std::move(b));
      auto bm = event("batch_measured", t);
      bm.fields = {{"choice", c}, {"batch", std::int64_t{214}}, {"measured_goodput", 14000.0}};
      (void)(*log)->append(std::move(bm));
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int hours = 24, nodes = 3, reps = 5;
  bool fixed = false;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--hours")
      hours = std::atoi(argv[i + 1]);
    else if (a == "--nodes")
      nodes = std::atoi(argv[i + 1]);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--pace")
      fixed = std::string(argv[i + 1]) == "fixed";
  }
  const std::string path = dir + "/timeline-read-bench-" + std::to_string(::getpid()) + ".jsonl";
  write_timeline(path, hours, nodes, fixed);
  const auto bytes = std::filesystem::file_size(path);
  std::size_t lines = 0;
  if (auto all = read_events(path, 0, {})) lines = all->events.size();
  struct way {
    const char* name;
    line_filter filter;
  };
  const std::vector<way> ways{
      {"all", {}},
      {"notable",
       [](std::string_view l) {
         const auto k = peek_kind(l);
         return k != "metrics" && k != "node_stats";
       }},
      {"batch",
       [](std::string_view l) {
         const auto k = peek_kind(l);
         return k == "batch" || k == "batch_measured";
       }},
  };
  for (const auto& w : ways) {
    std::vector<double> ms;
    std::size_t events = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto read = read_events(path, 0, w.filter);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (!read) return (std::fprintf(stderr, "%s\n", read.err().to_string().c_str()), 1);
      events = read->events.size();
    }
    std::printf(
        "{\"bench\":\"timeline_read\",\"way\":\"%s\",\"pace\":\"%s\",\"hours\":%d,\"nodes\":%d,"
        "\"mb\":%.1f,\"lines\":%zu,\"events_parsed\":%zu,\"median_ms\":%.1f,\"min_ms\":%.1f}\n",
        w.name, fixed ? "fixed" : "thinning", hours, nodes, static_cast<double>(bytes) / 1e6, lines, events,
        median(ms), *std::min_element(ms.begin(), ms.end()));
  }
  std::filesystem::remove(path);
  return 0;
}
