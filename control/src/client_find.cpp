// Finding a job's directory, and a job `troupe run --submit` queued: no directory until its runner
// starts, only the record of the runner's Slurm job beside it (submitted_runner.hpp). `troupe status`
// and `stop --job-dir` tell it and cancel it: they said "no such job directory", and only scancel
// reached it.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <tuple>

#include "submitted_runner.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/client.hpp"

namespace troupe::control {

namespace {
// The runner recorded for `job_dir` that has not started it: the directory absent (`run --submit`
// queued), or one no runner runs (`run --resume DIR --submit` queued). nullopt: none recorded.
std::optional<recorded_runner> runner_not_started(const std::string& job_dir) {
  std::error_code ec;
  if (job_dir.empty() || !std::filesystem::exists(submitted_runner_path(job_dir), ec)) return std::nullopt;
  if (std::filesystem::exists(job_dir, ec)) {
    auto dir = cluster::job_dir::open(job_dir);
    if (!dir || dir->runner_pid()) return std::nullopt;
  }
  return read_recorded_runner(job_dir);
}

queued_job queued_of(const std::string& job_dir, const recorded_runner& r) {
  std::error_code ec;
  return {job_dir_name(job_dir), r.job, r.state, std::filesystem::exists(job_dir, ec)};
}
}  // namespace

std::optional<queued_job> queued_job_at(const std::string& job_dir) {
  auto r = runner_not_started(job_dir);
  if (!r || r->final()) return std::nullopt;
  return queued_of(job_dir, *r);
}

expected<std::optional<queued_job>> cancel_queued_job(const std::string& job_dir) {
  auto r = runner_not_started(job_dir);
  if (!r || r->final()) return std::optional<queued_job>();
  auto n = cluster::cancel_leftovers(r->cluster, {job_dir_name(job_dir), r->record});
  if (!n) return n.err();
  return std::optional<queued_job>(queued_of(job_dir, *r));
}

namespace {
// What find_job_dir adds to "no such job directory" from the job's record ("" when it has none).
std::string submitted_note(const std::string& job_dir) {
  std::error_code ec;
  auto r = std::filesystem::exists(job_dir, ec) ? std::nullopt : runner_not_started(job_dir);
  if (!r) return {};
  const auto job = std::to_string(r->job);
  if (!r->final())
    return ": its runner, submitted as Slurm job " + job + ", is " + r->state + " (troupe stop --job-dir " +
           job_dir + " cancels it)";
  const auto out = r->record.substr(0, r->record.size() - 4) + ".out";  // <id>.runner.out
  return ": its runner, submitted as Slurm job " + job + ", ended" +
         (r->state.empty() ? std::string() : " (" + r->state + ")") + " without it; its output: " + out;
}

// When a runner last started the job (its instance file, written by each run and --resume), else
// when the job was made.
std::filesystem::file_time_type started_at(const cluster::job_dir& dir) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(dir.instance_path(), ec);
  return ec ? std::filesystem::last_write_time(dir.job_toml_path(), ec) : t;
}

// Whether the user running this command owns `path` (not through a link). In a root several users
// share, only their own jobs are taken without --job-dir: a directory another user made to look
// like the job started last was taken, and root's `troupe stop` wrote into it.
bool mine(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && st.st_uid == ::geteuid();
}
// A --job-dir given: it must be a job's directory (else bad usage, exit 2).
expected<std::string> named_job_dir(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);  // its context says what is missing, in words
  if (!dir)
    return make_unexpected(core_errc::invalid_argument,
                           "--job-dir " + dir.err().context() + submitted_note(job_dir));
  return job_dir;
}
}  // namespace

expected<void> check_jobs_root(const std::string& root) {
  std::error_code ec;
  if (std::filesystem::is_directory(root, ec)) return {};
  return make_unexpected(core_errc::invalid_argument,
                         "--root " + root + ": " +
                             (std::filesystem::exists(root, ec) ? "not a directory" : "no such directory") +
                             " (the jobs root: the directory `troupe run` puts job directories in)");
}

expected<std::string> find_job_dir(const std::string& job_dir, const std::string& root) {
  if (!job_dir.empty()) return named_job_dir(job_dir);
  // A root that is not there was "no job of yours under it" (as if it held others' jobs).
  if (auto r = check_jobs_root(root); !r) return r.err();
  auto ids = cluster::job_dir::list(root);
  if (!ids) return ids.err();
  std::erase_if(*ids, [&](const std::string& id) { return !mine(root + "/" + id); });
  if (ids->empty())
    return make_unexpected(core_errc::invalid_argument,
                           "no job of yours under " + root + " (give --job-dir)");
  // The job a runner runs that it started last, else the last started of all. By when nodes.json
  // changed (a worker restarted, a scale, a job's end) `troupe stop` stopped another job than the
  // newest. `train --local` leaves a job directory of its model too, with no runner: passed over.
  // Of jobs that ended, one that trained before a `troupe predict`/`evaluate` run after it (status
  // showed the evaluation's job, and stop said it was not running).
  struct candidate {
    bool running;
    bool trains;
    std::filesystem::file_time_type started;
    std::string path;
  };
  std::optional<candidate> best;
  std::error_code ec;
  for (const auto& id : *ids) {
    auto dir = cluster::job_dir::open(root + "/" + id);
    if (!dir ||
        (!std::filesystem::exists(dir->lock_path(), ec) && !std::filesystem::exists(dir->nodes_path(), ec)))
      continue;
    const auto toml = dir->read_job_toml();
    const bool predicts = toml && (toml->find("strategy = 'predict'") != std::string::npos ||
                                   toml->find("strategy = \"predict\"") != std::string::npos);
    candidate c{dir->runner_pid().has_value(), !predicts, started_at(*dir), root + "/" + id};
    if (!best ||
        std::tie(c.running, c.trains, c.started) > std::tie(best->running, best->trains, best->started))
      best = std::move(c);
  }
  return best ? best->path : root + "/" + ids->front();
}

}  // namespace troupe::control
