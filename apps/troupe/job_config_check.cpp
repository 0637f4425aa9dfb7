#include "job_config_check.hpp"

#include "troupe/core/log.hpp"
#include "troupe/nn/config.hpp"

namespace troupe::cli {

expected<config_doc> load_job_doc(const std::string& file, const std::vector<std::string>& overrides) {
  auto doc = config_doc::from_file(file);
  if (!doc) return doc;
  for (const auto& o : overrides)
    if (auto r = doc->apply_override(o); !r) return r.err();
  return doc;
}

expected<void> validate_job_doc(const config_doc& doc) {
  config_reader r(doc);
  (void)log_config::read(r.section("log"), log_config{});
  if (doc.has("model") || doc.has("train") || doc.has("data")) (void)nn::read_job_config(r);
  return r.finish();
}

}  // namespace troupe::cli
