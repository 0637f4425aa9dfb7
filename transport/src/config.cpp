#include "troupe/transport/config.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "troupe/transport/errc.hpp"

namespace troupe {

transport_config transport_config::read(config_section s) {
  transport_config c;
  c.listen_host = s.get_string("listen_host", c.listen_host);
  c.listen_port = static_cast<std::uint16_t>(s.get_int("listen_port", 0, 0, 65535));
  c.heartbeat_interval = ms(s.get_int("heartbeat_ms", c.heartbeat_interval.count(), 1, 60'000));
  c.heartbeat_timeout = ms(s.get_int("heartbeat_timeout_ms", c.heartbeat_timeout.count(), 2, 600'000));
  c.handshake_timeout = ms(s.get_int("handshake_timeout_ms", c.handshake_timeout.count(), 1, 600'000));
  c.connect_timeout = ms(s.get_int("connect_timeout_ms", c.connect_timeout.count(), 1, 600'000));
  c.reconnect_initial = ms(s.get_int("reconnect_initial_ms", c.reconnect_initial.count(), 1, 600'000));
  c.reconnect_max = ms(s.get_int("reconnect_max_ms", c.reconnect_max.count(), 1, 3'600'000));
  c.reconnect_attempts =
      static_cast<int>(s.get_int("reconnect_attempts", c.reconnect_attempts, 0, 1'000'000));
  c.send_queue_bytes = static_cast<std::size_t>(
      s.get_int("send_queue_bytes", static_cast<std::int64_t>(c.send_queue_bytes), 1 << 16, 1ll << 40));
  c.limits.max_frame_bytes = static_cast<std::size_t>(
      s.get_int("max_frame_bytes", static_cast<std::int64_t>(c.limits.max_frame_bytes), 4096, 1ll << 31));
  c.limits.max_segments =
      static_cast<std::uint32_t>(s.get_int("max_segments", c.limits.max_segments, 1, 512));
  auto file = s.get_string("token_file", "");
  auto env = s.get_string("token_env", default_token_env);
  auto inline_token = s.get_string("token", "");
  auto tok = load_token(file, env, inline_token);
  if (!tok) {
    s.fail(file.empty() ? "token_env" : "token_file", core_errc::io_error, tok.err().to_string());
  } else {
    c.token = std::move(*tok);
  }
  if (c.heartbeat_timeout <= c.heartbeat_interval)
    s.fail("heartbeat_timeout_ms", core_errc::out_of_range, "must be larger than heartbeat_ms");
  return c;
}

expected<void> transport_config::validate() const {
  auto bad = [](const char* key, const char* why) {
    return make_unexpected(core_errc::out_of_range, std::string("transport.") + key + ": " + why);
  };
  if (heartbeat_interval.count() <= 0) return bad("heartbeat_ms", "must be positive");
  if (heartbeat_timeout <= heartbeat_interval) return bad("heartbeat_timeout_ms", "must exceed heartbeat_ms");
  if (limits.max_segments == 0 || limits.max_segments > 512) return bad("max_segments", "must be 1..512");
  if (limits.max_frame_bytes < 4096) return bad("max_frame_bytes", "must be at least 4096");
  if (send_queue_bytes < limits.max_frame_bytes / 64) return bad("send_queue_bytes", "too small");
  return {};
}

expected<std::string> load_token(const std::string& token_file, const std::string& env_var,
                                 const std::string& inline_token) {
  if (!token_file.empty()) {
    std::ifstream in(token_file, std::ios::binary);
    if (!in)
      return make_unexpected(transport_errc::token_error, "cannot read token file '" + token_file + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    if (t.empty())
      return make_unexpected(transport_errc::token_error, "token file '" + token_file + "' is empty");
    return t;
  }
  if (!env_var.empty()) {
    if (const char* v = std::getenv(env_var.c_str()); v && *v) return std::string(v);
  }
  return inline_token;
}

expected<host_port> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return make_unexpected(transport_errc::bad_address, "expected host:port, got '" + text + "'");
  host_port hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 0 || p > 65535)
    return make_unexpected(transport_errc::bad_address, "bad port '" + port + "' in '" + text + "'");
  hp.port = static_cast<std::uint16_t>(p);
  return hp;
}

}  // namespace troupe
