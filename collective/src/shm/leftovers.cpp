#include "leftovers.hpp"

#include <cctype>
#include <filesystem>

namespace troupe::collective {

std::size_t remove_shm_leftovers(const std::string& job, shm_leftovers which) {
  const bool rings = (static_cast<int>(which) & static_cast<int>(shm_leftovers::rings)) != 0;
  const bool beacons = (static_cast<int>(which) & static_cast<int>(shm_leftovers::beacons)) != 0;
  std::error_code ec;
  std::size_t removed = 0;
  std::string prefix = "troupe-" + job + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    auto rest = name.substr(prefix.size());  // "e<epoch>-r<rank>" or "live-<node>", not another job's
    bool ring = rest.size() > 1 && rest[0] == 'e' && std::isdigit(static_cast<unsigned char>(rest[1]));
    bool beacon = rest.rfind("live-", 0) == 0;
    if ((rings && ring) || (beacons && beacon)) removed += std::filesystem::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace troupe::collective
