#include "job_config_check.hpp"

#include "troupe/actors/job_check.hpp"
#include "troupe/actors/job_spec.hpp"
#include "troupe/core/log.hpp"

namespace troupe::cli {

expected<config_doc> load_job_doc(const std::string& file, const std::vector<std::string>& overrides) {
  auto doc = config_doc::from_file(file);
  if (!doc) return doc;
  for (const auto& o : overrides)
    if (auto r = doc->apply_override(o); !r) return r.err();
  return doc;
}

expected<void> validate_job_doc(const config_doc& doc) {
  auto spec = actors::job_spec::read(doc);
  if (!spec) return spec.err();
  // The rest of what `troupe run` refuses before it starts (strategy, model, data paths).
  if (auto c = actors::check_job(*spec); !c) return std::move(c).err().wrap(doc.source());
  return {};
}

}  // namespace troupe::cli
