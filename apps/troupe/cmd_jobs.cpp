// `troupe jobs [--root DIR] [--json]`: every job under the jobs root, newest first, one line each:
// its state (running, finished, failed, stopped, dead, ...), strategy, workers, tasks, when it
// started, how long it ran and why it ended. The rows are the dashboard's (/api/jobs: the same
// reading of each job directory), so the two never disagree.
// `troupe jobs prune --older-than AGE [--dry-run]`: removes the directories of this user's jobs that
// ended (finished, failed, stopped, interrupted) longer than AGE ago; running, starting and dead jobs
// (their runner died: `--resume` continues them) are kept, as are other users', and a job whose model
// a running `troupe serve` under the same root serves (its reload and SIGHUP re-read that directory).
// It also sweeps this host's /dev/shm of what killed jobs left that no process holds (a job whose
// runner was killed and whose directory was then removed by hand: nothing else would remove it).
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "age.hpp"
#include "command.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/own_path.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/observe/dashboard.hpp"
#include "troupe/observe/server_state.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::cli {
namespace {

struct options {
  std::string root = "jobs";
  bool json = false;
  std::string older_than;  // prune: "2w", "7d", "12h", "30m", "90s"
  bool dry_run = false;
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

std::uintmax_t size_of(const std::filesystem::path& dir) {
  std::uintmax_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) n += it->file_size(ec);
  return n;
}

// How the job at `path` ended (result.json's status) and how long ago, when it did and its runner is
// gone; nullopt for a job still running, starting, or dead (no status: its runner died).
struct ended_job {
  std::string status;
  double age_s = 0;
};
std::optional<ended_job> ended(const std::string& path) {
  auto dir = cluster::job_dir::open(path);
  if (!dir || dir->runner_pid()) return std::nullopt;
  std::ifstream in(dir->result_path());
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string()) return std::nullopt;
  const std::string status = j["status"];
  if (status != "finished" && status != "failed" && status != "stopped" && status != "interrupted")
    return std::nullopt;
  struct stat st {};
  if (::stat(dir->result_path().c_str(), &st) != 0) return std::nullopt;
  return ended_job{status, std::difftime(std::time(nullptr), st.st_mtime)};
}

// The model directories the running servers under `root` serve (server.json's model.model_path:
// absolute, as the server resolved it; while it starts, the model_path it was given), by server name.
std::vector<std::pair<std::string, std::filesystem::path>> served_models(const std::string& root) {
  std::vector<std::pair<std::string, std::filesystem::path>> out;
  for (const auto& s : serve::list_servers(root)) {
    auto j = nlohmann::json::parse(s.server_json, nullptr, false);
    if (!j.is_object()) continue;
    // Running as `serve status` says it (observe::server_state): a server on another machine of a
    // shared root, whose lock this one cannot see, too (it was not protected).
    const auto state = observe::server_state_of_json(s.running, s.server_json, clock::system().wall_ms());
    if (state != "serving" && state != "draining" && state != "starting") continue;
    const bool serving = j.contains("model") && j["model"].is_object();
    const auto path = (serving ? j["model"] : j).value("model_path", std::string());
    std::error_code ec;
    if (!path.empty()) out.emplace_back(s.name, std::filesystem::weakly_canonical(path, ec));
  }
  return out;
}

// Whether a server serves a model from inside the job directory `path` (said, naming it).
bool kept_for_server(const std::vector<std::pair<std::string, std::filesystem::path>>& served,
                     const std::string& path, const std::string& id) {
  std::error_code ec;
  const auto dir = std::filesystem::weakly_canonical(path, ec);
  for (const auto& [name, model] : served) {
    const auto rel = model.lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..") continue;
    std::printf(
        "kept %s: its model is served by '%s' (troupe serve stop %s, or reload another model, first)\n",
        id.c_str(), name.c_str(), name.c_str());
    return true;
  }
  return false;
}

// Removes (or with dry_run, only names) one job's directory, taking its runner lock first and asking
// again under it whether the job ended long enough ago (a `run --resume` may have started it since it
// was read; one starting now finds its directory gone and stops): 1 removed, 0 kept, -1 failed.
int remove_job(const std::string& path, const char* line, bool dry_run, double limit) {
  if (dry_run) return std::printf("would remove %s\n", line), 1;
  auto dir = cluster::job_dir::open(path);
  auto gone = dir ? dir->remove_unless_running([&] {
    const auto e = ended(path);
    return e && e->age_s >= limit;
  })
                  : expected<bool>(false);
  if (!gone) {
    std::fprintf(stderr, "troupe: error: %s (left as it is)\n", gone.err().context().c_str());
    return -1;
  }
  if (!*gone)
    return std::printf("kept %s: its runner started as it was to be removed\n", dir->job_id().c_str()), 0;
  std::printf("removed %s\n", line);
  return 1;
}

// What a prune killed as it removed left (the hidden .removing-<id>-<pid> directories of
// remove_unless_running whose process is gone), this user's.
void sweep_set_aside(const std::string& root, bool dry_run) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(root, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (!cluster::job_dir::left_by_dead_remover(name) ||
        !cluster::not_own_directory(it->path().string()).empty())
      continue;
    std::error_code rm;
    if (!dry_run) std::filesystem::remove_all(it->path(), rm);
    if (rm)
      std::fprintf(stderr, "troupe: error: %s: %s (left as it is)\n", it->path().c_str(),
                   rm.message().c_str());
    else
      std::printf("%s %s (a prune that was killed set it aside)\n", dry_run ? "would remove" : "removed",
                  name.c_str());
  }
}

// This user's shared memory of job instances nothing on this host holds, unchanged for 10 minutes.
void sweep_shared_memory(bool dry_run) {
  const auto swept = collective::sweep_orphaned_shm(std::chrono::minutes(10), dry_run);
  if (swept.instances.empty()) return;
  std::string which;
  for (const auto& k : swept.instances) which += (which.empty() ? "" : ", ") + k;
  std::printf("%s %zu /dev/shm name%s (%.1f MB) of %zu killed job instance%s no process holds: %s\n",
              dry_run ? "would remove" : "removed", swept.names, swept.names == 1 ? "" : "s",
              static_cast<double>(swept.bytes) / 1e6, swept.instances.size(),
              swept.instances.size() == 1 ? "" : "s", which.c_str());
}

int prune(const options& o) {
  if (auto r = control::check_jobs_root(o.root); !r) return usage_error(r.err().context());
  const auto limit = age_seconds(o.older_than);
  if (!limit) return usage_error(age_refusal(o.older_than));
  auto ids = cluster::job_dir::list(o.root);
  if (!ids) return run_error(ids.err());
  const auto served = served_models(o.root);
  std::size_t removed = 0, kept = 0, failed = 0;
  std::uintmax_t bytes = 0;
  for (const auto& id : *ids) {
    const std::string path = o.root + "/" + id;
    // Another user's (or a link planted in a shared root): never this command's to remove.
    auto e = cluster::not_own_directory(path).empty() ? ended(path) : std::nullopt;
    if (!e || e->age_s < *limit) {
      ++kept;
      continue;
    }
    if (kept_for_server(served, path, id)) {
      ++kept;
      continue;
    }
    const auto size = size_of(path);
    char line[160];
    std::snprintf(line, sizeof line, "%s (%s %.1f d ago, %.1f MB)", id.c_str(), e->status.c_str(),
                  e->age_s / 86400, static_cast<double>(size) / 1e6);
    const int done = remove_job(path, line, o.dry_run, *limit);
    failed += done < 0;
    kept += done == 0;
    removed += done > 0;
    bytes += done > 0 ? size : 0;
  }
  sweep_set_aside(o.root, o.dry_run);
  std::printf("%s %zu job%s (%.1f MB); kept %zu (running, dead, newer, served, or not yours)\n",
              o.dry_run ? "would remove" : "removed", removed, removed == 1 ? "" : "s",
              static_cast<double>(bytes) / 1e6, kept);
  sweep_shared_memory(o.dry_run);
  return failed > 0 ? 1 : 0;
}

const command_registrar reg{
    "jobs", "List every job under the jobs root: state, workers, tasks, how it ended",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      sub.add_option("--root", o->root, "where job directories are (default: jobs)");
      sub.add_flag("--json", o->json, "the dashboard's /api/jobs answer, as JSON");
      auto* pr =
          sub.add_subcommand("prune",
                             "Remove the directories of your jobs that ended longer ago than --older-than "
                             "(running, starting and dead jobs are kept)");
      pr->add_option("--root", o->root, "where job directories are (default: jobs)");
      pr->add_option("--older-than", o->older_than, "how long ago the job ended: 2w, 7d, 12h, 30m, 90s")
          ->required();
      pr->add_flag("--dry-run", o->dry_run, "say what would be removed; remove nothing");
      return [o, pr]() -> int {
        quiet_logs();
        return pr->parsed() ? prune(*o) : list(*o);
      };
    }};

}  // namespace
}  // namespace troupe::cli
