// The shortest decimal text that reads back as the same double ("0.1", not printf's
// "0.10000000000000001" or "0.100000"): what a person or a parser is shown of a value
// (Prometheus' le labels, a config value written back, a number in an error).
#pragma once

#include <charconv>
#include <string>

namespace troupe {

// std::to_string's text where to_chars cannot write it (never for a finite double in 64 bytes).
inline std::string shortest_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::to_string(v);
}

}  // namespace troupe
