#include "troupe/job/job_file.hpp"

#include <filesystem>

#include "troupe/cluster/job_dir.hpp"

namespace troupe::job {

namespace {
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

expected<config_doc> read_job_file(const std::string& path) {
  namespace fs = std::filesystem;
  auto doc = config_doc::from_file(path);
  if (!doc) return doc;
  config_reader r(*doc);
  auto data = r.section("data");
  if (data.get_string("source", "") != "store") return doc;
  std::error_code ec;
  const fs::path base = fs::absolute(path, ec).parent_path();
  for (const char* key : {"train", "test"}) {
    // A value of the wrong type stays as it is: job_spec::read reports it, naming the key.
    if (!data.has(key)) continue;
    const std::string dir = data.get_string(key, "");
    if (dir.empty() || fs::path(dir).is_absolute()) continue;
    const std::string resolved = (base / dir).lexically_normal().string();
    if (auto o = doc->apply_override(std::string("data.") + key + "=" + toml_string(resolved)); !o)
      return o.err();
  }
  return doc;
}

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
