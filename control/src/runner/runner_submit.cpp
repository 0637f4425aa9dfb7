// `troupe run --submit`: the runner as a Slurm job of its own, on the control partition (not
// preempted) and control_host. The job file is read here first, so a bad one is an error at once;
// the runner's job re-reads it on the host (an absolute path: it and [job] root must be on a
// filesystem every host sees). Its stdout/stderr (the progress lines, the final JSON line) go to
// <root>/<id>.runner.out beside the job directory, which exists only once the runner starts.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "runner.hpp"
#include "submitted_runner.hpp"
#include "troupe/job/job_file.hpp"

namespace troupe::control {

namespace fs = std::filesystem;

namespace {
// The runner's command line on the host: the same job, with the id fixed here.
std::vector<std::string> runner_argv(const run_options& o, const std::string& file, const std::string& id) {
  std::vector<std::string> a = {"troupe", "run", file, "--job-id", id};
  for (const auto& s : o.overrides) a.insert(a.end(), {"--set", s});
  if (o.workers) a.insert(a.end(), {"--workers", std::to_string(*o.workers)});
  if (!o.progress) a.push_back("--quiet");
  return a;
}
}  // namespace

namespace {
// The runner as a Slurm node: run from the working directory here (a filesystem the hosts share).
cluster::node_spec runner_node(std::vector<std::string> argv, std::string log_file, const std::string& host) {
  cluster::node_spec ns;
  ns.id = node_id{"runner", 0};
  ns.argv = std::move(argv);
  std::error_code ec;
  ns.working_dir = std::filesystem::current_path(ec).string();
  ns.log_file = std::move(log_file);
  ns.host = host;
  return ns;
}

// Waits (up to 30 s) until the submitted runner has `started` (printed: `started_text`), or its Slurm
// job ended before: `ended(state)` says why, exit 1. Still queued after the wait: exit 0, saying so.
int await_runner(const cluster::cluster_config& cfg, long job, const std::string& dir,
                 const std::function<bool()>& started, const char* started_text,
                 const std::function<void(const std::string&)>& ended) {
  auto& clk = troupe::clock::system();
  const auto until = clk.now() + std::chrono::seconds(30);
  std::string state;
  for (;;) {
    if (started()) return std::printf("%s\n", started_text), 0;
    auto s = cluster::slurm_job_state(cfg, job);
    if (s) state = *s;
    if (s && (s->empty() || cluster::slurm_state_is_final(*s))) break;
    if (clk.now() >= until)
      return std::printf("the runner's job is %s (troupe stop --job-dir %s cancels it)\n", state.c_str(),
                         dir.c_str()),
             0;
    clk.sleep_for(std::chrono::milliseconds(500));
  }
  if (started()) return std::printf("%s\n", started_text), 0;
  ended(state.empty() ? "no longer listed" : state);
  return 1;
}

// The wall time (ms) `path` was last written; nullopt: no such file.
std::optional<std::int64_t> written_wall_ms(const std::string& path) {
  std::error_code ec;
  const auto t = std::filesystem::last_write_time(path, ec);
  if (ec) return std::nullopt;
  const auto sys = std::chrono::file_clock::to_sys(t);
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

// Why `dir`'s job cannot be resumed by a submitted runner ("" when it can): it finished, or a runner
// still runs it (its beat is fresh: it would refuse the new runner, which --submit read as resumed).
std::string resume_problem(const cluster::job_dir& jd) {
  if (finished_job(jd.result_path()))
    return "--resume " + jd.path() + ": the job finished (see " + jd.result_path() + "): nothing to resume";
  // A runner beats every second: a beat that moves within 1.5 s is a live one (a fresh beat alone may
  // be the last of a runner that just stopped).
  auto& clk = troupe::clock::system();
  const auto path = cluster::runner_beat_path(jd.path());
  const auto beat = written_wall_ms(path);
  if (!beat || clk.wall_ms() - *beat > 5000) return {};
  clk.sleep_for(std::chrono::milliseconds(1500));
  if (const auto again = written_wall_ms(path); again && *again != *beat)
    return "--resume " + jd.path() +
           ": a runner still runs this job (its beat moves): troupe status or stop --job-dir " + jd.path();
  return {};
}

// The runner's job for `--resume DIR --submit` (a submitted runner scancelled, or its host lost: the
// job could be continued only by a runner in the foreground), with --workers and --quiet as given.
// Its output is appended to the first runner's (<root>/<id>.runner.out); it has resumed once the
// job's beat (runner.beat) is newer than the submission (resume_problem refused a live runner).
int submit_resume(const run_options& o) {
  auto jd = cluster::job_dir::open(o.resume);
  if (!jd) return usage_refusal("--resume " + jd.err().context());
  if (auto why = resume_problem(*jd); !why.empty()) return usage_refusal(why);
  std::error_code ec;
  const auto dir = fs::absolute(jd->path(), ec).lexically_normal();  // job_dir::open dropped a trailing '/'
  auto doc = job::read_job_file(jd->job_toml_path(), {});
  if (!doc) return usage_refusal("--resume " + dir.string() + ": " + doc.err().describe());
  auto spec = job::job_spec::read(*doc);
  if (!spec) return usage_refusal(spec.err().describe());
  if (spec->cluster.launcher != "slurm")
    return usage_refusal("run --submit: the runner goes to Slurm only with [cluster] launcher = \"slurm\"");
  const auto beat = cluster::runner_beat_path(dir.string());
  const auto before = written_wall_ms(beat);
  std::vector<std::string> argv = {"troupe", "run", "--resume", dir.string()};
  if (o.workers) argv.insert(argv.end(), {"--workers", std::to_string(*o.workers)});
  if (!o.progress) argv.push_back("--quiet");
  auto ns = runner_node(std::move(argv), (dir.parent_path() / (jd->job_id() + ".runner.out")).string(),
                        spec->cluster.control_host);
  submitted_runner last(submitted_runner_path(dir.string()));
  if (auto why = last.busy(spec->cluster, "--resume " + dir.string()); !why.empty())
    return usage_refusal(why);
  auto job = cluster::submit_slurm_node(spec->cluster, {jd->job_id(), ""}, ns);
  if (!job) return usage_refusal("run --submit: " + job.err().describe(), 1);
  last.record(*job, spec->cluster);
  std::printf("submitted the runner of %s as Slurm job %ld\nrunner output: %s\n", dir.string().c_str(), *job,
              ns.log_file.c_str());
  auto beats = [&] {
    auto t = written_wall_ms(beat);
    return t && (!before || *t != *before);
  };
  return await_runner(
      spec->cluster, *job, dir.string(), beats, "the runner resumed the job", [&](const std::string& state) {
        spdlog::error(
            "run --resume --submit: the runner's Slurm job {} ended ({}) before it resumed the job; its "
            "output: {}",
            *job, state, ns.log_file);
      });
}
}  // namespace

int submit_job(const run_options& o) {
  if (!o.resume.empty()) return submit_resume(o);
  auto doc = job::read_job_file(o.file, o.overrides);
  if (!doc) return usage_refusal(doc.err().describe());
  auto spec = job::job_spec::read(*doc);
  if (!spec) return usage_refusal(spec.err().describe());
  if (spec->cluster.launcher != "slurm")
    return usage_refusal(
        "run --submit: the runner goes to Slurm only with [cluster] launcher = \"slurm\" (this job's is \"" +
        spec->cluster.launcher + "\")");
  std::string id = o.job_id.empty() ? default_job_id(spec->job.name) : o.job_id;
  std::error_code ec;
  auto root = fs::absolute(spec->job.root, ec).lexically_normal();
  fs::create_directories(root, ec);
  if (ec) return usage_refusal("[job] root " + root.string() + ": " + ec.message(), 1);
  submitted_runner last(submitted_runner_path((root / id).string()));
  if (auto why = last.busy(spec->cluster, "run --submit --job-id " + id); !why.empty())
    return usage_refusal(why);
  const auto dir = root / id;
  if (fs::exists(dir)) return usage_refusal("job directory " + dir.string() + " exists", 1);
  auto ns = runner_node(runner_argv(o, fs::absolute(o.file).string(), id),
                        (root / (id + ".runner.out")).string(), spec->cluster.control_host);
  auto job = cluster::submit_slurm_node(spec->cluster, {id, ""}, ns);
  if (!job) return usage_refusal("run --submit: " + job.err().describe(), 1);
  last.record(*job, spec->cluster);
  std::printf("submitted the runner as Slurm job %ld\njob directory: %s\nrunner output: %s\n", *job,
              dir.string().c_str(), ns.log_file.c_str());
  return await_runner(
      spec->cluster, *job, dir.string(), [&] { return fs::exists(dir / "job.toml", ec); },
      "the runner started",
      [&](const std::string& state) {
        // A [job] root the hosts do not share ended it at once (FAILED, exit 0:53) while --submit said
        // "submitted" and exited 0.
        spdlog::error(
            "run --submit: the runner's Slurm job {} ended ({}) before it made {}: is [job] root on a "
            "filesystem the hosts share (and the troupe binary at the same path there)? Its output, if "
            "the host could write it: {}",
            *job, state, dir.string(), ns.log_file);
      });
}

}  // namespace troupe::control
