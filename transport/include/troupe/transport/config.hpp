// Transport settings: the [transport] section of a job file, or flags of `troupe net`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "troupe/core/config.hpp"
#include "troupe/core/error.hpp"

namespace troupe {

// Limits applied to every incoming frame before anything is allocated or decoded.
struct frame_limits {
  std::uint32_t max_segments = 512;         // segment-table entries per frame
  std::size_t max_frame_bytes = 64u << 20;  // segment table + segments
  std::uint32_t nesting_limit = 16;         // Cap'n Proto ReaderOptions::nestingLimit
  std::uint32_t traversal_factor = 8;       // traversal limit = factor x frame words (min 8 Ki)
};

// Limits while a peer is not yet authenticated: a stranger cannot make us allocate much.
inline frame_limits handshake_limits() {
  return {4, 4096, 8, 4};
}

struct transport_config {
  using ms = std::chrono::milliseconds;
  std::string listen_host = "127.0.0.1";  // loopback unless told otherwise
  std::uint16_t listen_port = 0;          // 0: any free port
  std::string token;                      // the cluster secret (never logged)
  ms heartbeat_interval{250};
  ms heartbeat_timeout{1000};  // a peer silent this long is declared dead
  ms handshake_timeout{2000};
  ms connect_timeout{2000};
  ms reconnect_initial{50};                  // backoff doubles from here, with jitter...
  ms reconnect_max{2000};                    // ...up to here
  int reconnect_attempts = 60;               // per outage; 0 = never reconnect
  std::size_t send_queue_bytes = 64u << 20;  // per connection; past it send() reports queue_full
  frame_limits limits;

  // Reads [transport]: listen_host, listen_port, heartbeat_ms, heartbeat_timeout_ms,
  // handshake_timeout_ms, connect_timeout_ms, reconnect_initial_ms, reconnect_max_ms,
  // reconnect_attempts, send_queue_bytes, max_frame_bytes, max_segments, token, token_file,
  // token_env. The token comes from load_token (see below).
  static transport_config read(config_section s);
  // Checks relations between values (timeout > interval, ...); the error names the key.
  expected<void> validate() const;
};

// The cluster token, first found of: the file `token_file` (trailing newline stripped), the
// environment variable `env_var`, the literal `inline_token`. Errors name the file or variable.
// An empty result is allowed (no token anywhere): the caller decides whether that is acceptable.
expected<std::string> load_token(const std::string& token_file, const std::string& env_var,
                                 const std::string& inline_token);
inline constexpr const char* default_token_env = "TROUPE_CLUSTER_TOKEN";

struct host_port {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};
// Parses "host:port" ("127.0.0.1:7000", "[::1]:7000"); the error names the text.
expected<host_port> parse_host_port(const std::string& text);

}  // namespace troupe
