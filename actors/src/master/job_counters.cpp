#include "job_counters.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"

namespace troupe::actors {

std::string counters_path(const std::string& job_dir) {
  return job_dir + "/counters.json";
}

expected<job_counters> load_counters(const std::string& job_dir) {
  const auto path = counters_path(job_dir);
  job_counters c;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return c;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_unexpected(core_errc::parse_error,
                           path + ": not a JSON object (remove it to start counting anew)");
  try {
    c.samples_trained = j.value("samples_trained", std::uint64_t{0});
    c.dropped_steps = j.value("dropped_steps", std::uint64_t{0});
    c.first_step_wall_ms = j.value("first_step_wall_ms", std::uint64_t{0});
    c.master_starts = j.value("master_starts", std::uint64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return make_unexpected(core_errc::parse_error, path + ": " + e.what());
  }
  return c;
}

expected<void> save_counters(const std::string& job_dir, const job_counters& c) {
  nlohmann::json j;
  j["samples_trained"] = c.samples_trained;
  j["dropped_steps"] = c.dropped_steps;
  j["first_step_wall_ms"] = c.first_step_wall_ms;
  j["master_starts"] = c.master_starts;
  return cluster::write_file_atomic(counters_path(job_dir), j.dump() + "\n");
}

}  // namespace troupe::actors
