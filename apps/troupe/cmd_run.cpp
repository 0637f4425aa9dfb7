// `troupe run job.toml`: trains a job on this machine (master, PS shards and workers as processes).
#include <memory>

#include "command.hpp"
#include "job_config_check.hpp"
#include "troupe/control/runner.hpp"

namespace troupe::cli {
namespace {

struct flags {
  control::run_options o;
  std::uint32_t workers = 0;
  bool quiet = false;
  bool submit = false;
};

const command_registrar reg{
    "run",
    "Run a training job: master, PS shards and workers as supervised processes (on this machine, or "
    "on [cluster] hosts or Slurm)",
    [](CLI::App& sub) -> runner {
      auto f = std::make_shared<flags>();
      auto* job = sub.add_option("job", f->o.file, "job file (TOML), e.g. examples/fashion_mnist.toml")
                      ->check(CLI::ExistingFile);
      sub.add_option("--resume", f->o.resume,
                     "continue the job in this directory: stopped, failed, interrupted, or its runner "
                     "died (from its journal and checkpoints; quarantined tasks are tried again)")
          ->check(CLI::ExistingDirectory)
          ->excludes(job);
      sub.add_option("--set", f->o.overrides, "override a key: --set train.epochs=2 (repeatable)");
      sub.add_option("--workers", f->workers, "initial number of workers (overrides job.workers)")
          ->check(CLI::Range(1, 16384));
      sub.add_option("--job-id", f->o.job_id, "name of the job directory (default: <name>-<time>-<random>)");
      // As predict, evaluate and status take it: the jobs root (job.root), here for the new job.
      sub.add_option_function<std::string>(
          "--root", [f](const std::string& root) { f->o.overrides.push_back(root_override(root)); },
          "the jobs root its directory goes under (job.root; default jobs)");
      sub.add_flag("--quiet", f->quiet, "no progress line");
      sub.add_flag(
          "--submit", f->submit,
          "submit the runner itself as a Slurm job ([cluster] launcher = \"slurm\"): prints its Slurm "
          "job id and the job directory, then returns (with --resume: that job, under a new runner)");
      return [f]() -> int {
        if (f->o.file.empty() && f->o.resume.empty())
          return usage_error("run: give a job file or --resume JOB_DIR");
        if (!f->o.resume.empty() && (!f->o.overrides.empty() || !f->o.job_id.empty()))
          return usage_error(
              "run --resume: the job keeps its job.toml and id (no --set, --root or --job-id)");
        if (f->workers > 0) f->o.workers = f->workers;
        if (f->o.resume.empty()) {  // the job file's errors as `troupe config check` prints them
          auto doc = load_job_doc(f->o.file, f->o.overrides);
          if (!doc) return usage_error(doc.err());
          // Named as given: "--set job.workers=5" for a flag the user never wrote.
          if (f->workers > 0)
            if (auto w = doc->apply_override("job.workers=" + std::to_string(f->workers),
                                             "--workers " + std::to_string(f->workers));
                !w)
              return usage_error(w.err());
          if (auto v = validate_job_doc(*doc); !v) return usage_error(v.err());
        }
        f->o.progress = !f->quiet;
        return f->submit ? control::submit_job(f->o) : control::run_job(f->o);
      };
    }};

}  // namespace
}  // namespace troupe::cli
