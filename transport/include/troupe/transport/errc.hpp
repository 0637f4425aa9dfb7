// Errors of the transport module. Every failure that reaches a caller is a troupe::error with one
// of these codes and a context naming the peer, address or frame.
#pragma once

#include <system_error>

namespace troupe {

enum class transport_errc {
  ok = 0,
  bad_address = 1,       // "host:port" could not be parsed or resolved
  listen_failed = 2,     // bind/listen refused (port in use, bad host)
  connect_failed = 3,    // TCP connect failed or timed out
  auth_failed = 4,       // the peer does not know the cluster token (or we do not)
  handshake_failed = 5,  // the peer broke the handshake protocol or timed out in it
  not_connected = 6,     // no open connection to the destination node
  queue_full = 7,        // the send queue to that node is at its byte limit (backpressure)
  malformed_frame = 8,   // bad segment table, oversize frame, or an invalid Cap'n Proto message
  frame_too_large = 9,   // a frame above the configured maximum
  closed = 10,           // the connection or the endpoint is shut down
  name_taken = 11,       // register_name on a name already registered
  bad_name = 12,         // an invalid node or actor name
  token_error = 13,      // the cluster token could not be read (file, environment, config)
  timeout = 14,          // a blocking call ran out of time
  wrong_thread = 15,     // a blocking call made on the endpoint's own io thread
};

const std::error_category& transport_category() noexcept;
inline std::error_code make_error_code(transport_errc e) noexcept {
  return {static_cast<int>(e), transport_category()};
}

}  // namespace troupe

template <>
struct std::is_error_code_enum<troupe::transport_errc> : std::true_type {};
