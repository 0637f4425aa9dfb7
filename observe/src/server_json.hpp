// observe's own reading of a server's server.json (server_state.hpp says the rule).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace troupe::observe {

// server_state_of_json for a parsed server.json.
std::string server_state_of(bool lock_held, const nlohmann::json& j, std::int64_t now_ms);

}  // namespace troupe::observe
