#include "troupe/job/job_file.hpp"

#include "troupe/cluster/job_dir.hpp"

namespace troupe::job {

expected<job_spec> load_job_spec(const std::string& job_dir) {
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return dir.err();
  auto text = dir->read_job_toml();
  if (!text) return text.err();
  auto doc = config_doc::from_string(*text, dir->job_toml_path());
  if (!doc) return doc.err();
  return job_spec::read(*doc);
}

}  // namespace troupe::job
