#include "job_config_check.hpp"

#include "troupe/actors/backends.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/core/log.hpp"
#include "troupe/job/job_check.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/job/job_spec.hpp"

namespace troupe::cli {

expected<config_doc> load_job_doc(const std::string& file, const std::vector<std::string>& overrides) {
  return job::read_job_file(file, overrides);
}

expected<std::vector<std::string>> validate_job_doc(const config_doc& doc, config_doc* effective) {
  auto spec = job::job_spec::read(doc, effective);
  if (!spec) return spec.err();
  // The rest of what `troupe run` refuses before it starts (strategy, model, data paths).
  if (auto c = job::check_job(*spec, actors::strategy_names(), actors::check_model_and_init); !c)
    return std::move(c).err().wrap(doc.source());
  // The epoch's last task, where the training set's size is known before `run` imports it.
  if (auto data = job::nominal_data_of(spec->nn.data); data && data->train_records)
    if (auto l = actors::check_last_task(*spec, data->info, *data->train_records); !l)
      return std::move(l).err().wrap(doc.source());
  auto notes = job::job_notes(*spec);
  if (auto why = job::name_problem(spec->job.name); !why.empty())
    notes.push_back("job.name '" + spec->job.name + "': " + why + " (or give `troupe run` a --job-id)");
  return notes;
}

}  // namespace troupe::cli
