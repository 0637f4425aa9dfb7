// Command-line clients (`troupe status`, `scale`, `stop`) join a job's network as "cli-<pid>":
// short-lived peers, not members of the job (their comings and goings are logged at debug).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "troupe/core/ids.hpp"

namespace troupe {

inline node_id client_node_id(std::uint64_t pid) {
  return node_id{"cli-" + std::to_string(pid), 0};
}

inline bool is_client_node(std::string_view name) noexcept {
  return name.starts_with("cli-");
}

}  // namespace troupe
