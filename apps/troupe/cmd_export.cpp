// `troupe export JOB_DIR [--out DIR]`: a job's model directory (model.pt, model.json;
// docs/model_format.md) from the state the job keeps: the one its evaluation scored when it
// finished, else its latest checkpoints (a running, stopped, failed or interrupted job). Prints one
// JSON line saying where the model is and which step and data epoch it is from.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "troupe/model/export_job.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::cli {
namespace {

int run_export(const model::export_options& o) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o.job_dir + "/job.toml", ec))
    return usage_error(o.job_dir + ": not a job directory (no job.toml)");
  auto r = model::export_job(o);
  if (!r && r.err() == core_errc::not_built) {
    run_error(r.err());
    return exit_not_built;  // the runner says "built without libtorch" by it
  }
  if (!r)
    return r.err() == storage::storage_errc::not_found || r.err() == core_errc::invalid_argument
               ? usage_error(r.err())
               : run_error(r.err());
  nlohmann::json j{
      {"model", r->dir},
      {"from", r->meta.from},
      {"step", r->meta.step},
      {"data_epoch", r->meta.data_epoch ? nlohmann::json(*r->meta.data_epoch) : nlohmann::json()},
      {"state", r->state_dir},
      {"dense_tensors", r->dense_tensors},
      {"embedding_rows", r->embedding_rows},
      {"verified_rows", r->verified_rows},
      {"seconds", r->seconds}};
  // Only where rows were checked (a user's TorchScript module is not re-run here): "0.0" on 0 rows
  // read as a check passed.
  if (r->verified_rows > 0) j["max_abs_logit_diff"] = r->max_abs_diff;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const command_registrar reg{
    "export", "Write a job's model directory (model.pt, model.json) from its state",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<model::export_options>();
      sub.add_option("job_dir", o->job_dir, "the job's directory (jobs/<id>)")->required();
      sub.add_option("--out", o->out, "where the model directory goes (default JOB_DIR/model)");
      return [o]() -> int { return run_export(*o); };
    }};

}  // namespace
}  // namespace troupe::cli
