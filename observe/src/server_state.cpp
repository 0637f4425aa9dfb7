#include "troupe/observe/server_state.hpp"

#include <fstream>

#include "server_json.hpp"

namespace troupe::observe {

const std::string& kernel_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line;
  }();
  return id;
}

std::string server_state(bool lock_held, std::string_view written, std::string_view written_kernel,
                         double age_s) {
  const bool live_word = written == "serving" || written == "draining" || written == "starting";
  const bool end_word = written == "stopped" || written == "failed";
  if (lock_held) return live_word || end_word ? std::string(written) : "starting";
  if (end_word) return std::string(written);
  if (!live_word) return "";
  const bool lock_seen = !written_kernel.empty() && written_kernel == kernel_id();
  // A file from the future is fresh: another machine's clock ahead of this one's (it read dead).
  return !lock_seen && age_s < 15 ? std::string(written) : "dead";
}

std::string server_state_of(bool lock_held, const nlohmann::json& j, std::int64_t now_ms) {
  if (!j.is_object()) return "";
  auto text = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto updated = j.find("updated_ms");
  const double updated_ms = updated != j.end() && updated->is_number() ? updated->get<double>() : 0;
  return server_state(lock_held, text("state"), text("kernel"),
                      (static_cast<double>(now_ms) - updated_ms) / 1000);
}

std::string server_state_of_json(bool lock_held, std::string_view server_json, std::int64_t now_ms) {
  return server_state_of(lock_held, nlohmann::json::parse(server_json, nullptr, false), now_ms);
}

}  // namespace troupe::observe
