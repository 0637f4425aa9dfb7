#include "troupe/job/data_model.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/job/data.hpp"

namespace troupe::job {

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::record_store& train) {
  return build_model(spec, train.info(), train.dir());
}

expected<std::unique_ptr<nn::model>> build_model(const job_spec& spec, const storage::manifest& train,
                                                 const std::string& name) {
  return nn::model_registry::instance().create(spec.nn.model, info_of(train, name));
}

std::string train_manifest_path(const std::string& job_dir) {
  return job_dir + "/train_manifest.toml";
}

expected<void> write_train_manifest(const std::string& job_dir, const storage::manifest& m) {
  return cluster::write_file_atomic(train_manifest_path(job_dir), m.to_toml());
}

expected<std::optional<storage::manifest>> read_train_manifest(const std::string& job_dir) {
  const auto path = train_manifest_path(job_dir);
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::optional<storage::manifest>();
    return make_unexpected(core_errc::io_error, path + ": cannot be read");
  }
  std::stringstream text;
  text << in.rdbuf();
  auto m = storage::manifest::parse(text.str(), path);
  if (!m) return m.err();
  return std::optional<storage::manifest>(std::move(*m));
}

}  // namespace troupe::job
