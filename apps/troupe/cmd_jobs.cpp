// `troupe jobs [--root DIR] [--json]`: every job under the jobs root, newest first, one line each:
// its state (running, finished, failed, stopped, dead, ...), strategy, workers, tasks, when it
// started, how long it ran and why it ended. The rows are the dashboard's (/api/jobs: the same
// reading of each job directory), so the two never disagree.
#include <cstdio>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "troupe/control/client.hpp"
#include "troupe/observe/dashboard.hpp"

namespace troupe::cli {
namespace {

struct options {
  std::string root = "jobs";
  bool json = false;
};

std::string count(const nlohmann::json& row, const char* key) {
  return row.contains(key) && row[key].is_number() ? std::to_string(row[key].get<long long>()) : "-";
}

std::string started(const nlohmann::json& row) {
  if (!row.contains("started_ms") || !row["started_ms"].is_number()) return "-";
  const std::time_t t = static_cast<std::time_t>(row["started_ms"].get<double>() / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string duration(const nlohmann::json& row) {
  if (!row.contains("duration_s") || !row["duration_s"].is_number()) return "-";
  const auto s = static_cast<long long>(row["duration_s"].get<double>());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

void print_row(const nlohmann::json& r) {
  std::string why = r.value("reason", r.value("error", std::string()));
  if (why.size() > 70) why = why.substr(0, 67) + "...";
  std::printf("%-32s %-11s %-10s %7s %11s  %-19s %9s  %s\n", r.value("id", std::string("?")).c_str(),
              r.value("state", std::string("-")).c_str(), r.value("strategy", std::string("-")).c_str(),
              (count(r, "workers_alive") + "/" + count(r, "workers_wanted")).c_str(),
              (count(r, "tasks_done") + "/" + count(r, "tasks_total")).c_str(), started(r).c_str(),
              duration(r).c_str(), why.c_str());
}

int list(const options& o) {
  if (auto r = control::check_jobs_root(o.root); !r) return usage_error(r.err().context());
  auto handler = observe::make_dashboard({o.root, "", false, {}, {}});
  observe::http_request req;
  req.method = "GET";
  req.target = req.path = "/api/jobs";
  const auto res = handler(req);
  auto j = nlohmann::json::parse(res.body, nullptr, false);
  if (res.status != 200 || !j.is_object())
    return run_error(error(core_errc::io_error, "--root " + o.root + ": " +
                                                    (j.is_object() ? j.value("error", res.body) : res.body)));
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%-32s %-11s %-10s %7s %11s  %-19s %9s  %s\n", "JOB", "STATE", "STRATEGY", "WORKERS", "TASKS",
              "STARTED", "DURATION", "REASON");
  for (const auto& row : j["jobs"]) print_row(row);
  if (j["jobs"].empty()) std::printf("(no jobs under %s)\n", o.root.c_str());
  return 0;
}

const command_registrar reg{"jobs", "List every job under the jobs root: state, workers, tasks, how it ended",
                            [](CLI::App& sub) -> runner {
                              auto o = std::make_shared<options>();
                              sub.add_option("--root", o->root, "where job directories are (default: jobs)");
                              sub.add_flag("--json", o->json, "the dashboard's /api/jobs answer, as JSON");
                              return [o]() -> int {
                                quiet_logs();
                                return list(*o);
                              };
                            }};

}  // namespace
}  // namespace troupe::cli
