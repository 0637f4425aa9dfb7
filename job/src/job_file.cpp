#include "troupe/job/job_file.hpp"

#include <array>
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

// Every key of a job file whose value names a file or directory (docs/job.md, "Paths").
constexpr std::array<std::pair<const char*, const char*>, 11> path_keys{{
    {"model", "path"},
    {"model", "init"},
    {"data", "train"},
    {"data", "test"},
    {"data", "dir"},
    {"data", "spill_dir"},
    {"job", "root"},
    {"job", "dataset_cache"},
    {"ps", "checkpoint_dir"},
    {"transport", "token_file"},
    {"log", "file"},
}};

// Every relative path `doc` writes under `keys`, made absolute against `base`.
template <typename Keys>
expected<void> resolve_paths(config_doc& doc, const std::filesystem::path& base, const Keys& keys) {
  namespace fs = std::filesystem;
  config_reader r(doc);
  for (const auto& [table, key] : keys) {
    auto s = r.section(table);
    // A value of the wrong type stays as it is: job_spec::read reports it, naming the key.
    if (!s.has(key)) continue;
    const std::string value = s.get_string(key, "");
    if (value.empty() || fs::path(value).is_absolute()) continue;
    const std::string resolved = (base / value).lexically_normal().string();
    const std::string dotted = std::string(table) + "." + std::string(key);
    if (auto o = doc.apply_override(dotted + "=" + toml_string(resolved)); !o) return o.err();
  }
  return {};
}
}  // namespace

expected<config_doc> read_job_file(const std::string& path) {
  namespace fs = std::filesystem;
  auto doc = config_doc::from_file(path);
  if (!doc) return doc;
  // Nothing in it (an empty file, comments alone, a FIFO nobody wrote): it trained Fashion-MNIST's
  // MLP, every key at its default, as if that were the job asked for.
  if (doc->to_toml().find_first_not_of(" \t\r\n") == std::string::npos)
    return make_unexpected(core_errc::invalid_argument,
                           path + ": sets nothing (an empty job file; `[job]` alone takes every default)");
  std::error_code ec;
  // absolute() first: "job.toml" has an empty parent, which absolute() would not resolve.
  if (auto r = resolve_paths(*doc, fs::absolute(path, ec).parent_path(), path_keys); !r) return r.err();
  return doc;
}

expected<config_doc> read_job_file(const std::string& path, const std::vector<std::string>& overrides) {
  auto doc = read_job_file(path);
  if (!doc) return doc;
  for (const auto& o : overrides)
    if (auto r = doc->apply_override(o); !r) return r.err();
  if (auto a = absolute_paths(*doc); !a) return a.err();
  return doc;
}

expected<config_doc> read_settings_file(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& keys) {
  auto doc = config_doc::from_file(path);
  if (!doc) return doc;
  std::error_code ec;
  if (auto r = resolve_paths(*doc, std::filesystem::absolute(path, ec).parent_path(), keys); !r)
    return r.err();
  return doc;
}

expected<void> absolute_paths(config_doc& doc) {
  std::error_code ec;
  return resolve_paths(doc, std::filesystem::current_path(ec), path_keys);
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
