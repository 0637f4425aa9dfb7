// What the transport's own tests may do to an endpoint that no other code may: write bytes verbatim
// on an open connection (malformed frames, to prove a peer survives them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "troupe/transport/endpoint.hpp"

namespace troupe {

struct endpoint_testing {
  // Writes `bytes` as they are on the open connection to `node`; not_connected when there is none.
  static expected<void> send_raw(endpoint& e, const std::string& node, std::vector<std::byte> bytes);
};

}  // namespace troupe
