#include "troupe/observe/server_state.hpp"

#include <fstream>

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

}  // namespace troupe::observe
