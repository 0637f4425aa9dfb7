// What the transport's own tests may do to an endpoint that no other code may: write bytes verbatim
// on an open connection (malformed frames, to prove a peer survives them), and make its sockets
// seem full to the heartbeats it writes straight to them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "troupe/transport/endpoint.hpp"

namespace troupe {

struct endpoint_testing {
  // Writes `bytes` as they are on the open connection to `node`; not_connected when there is none.
  static expected<void> send_raw(endpoint& e, const std::string& node, std::vector<std::byte> bytes);
  // Lets a frame written straight to a socket (a heartbeat of an idle connection) put at most
  // `bytes` into it at once, the rest going through the send queue: as if the socket were full.
  static void limit_direct_writes(endpoint& e, std::size_t bytes);
};

}  // namespace troupe
