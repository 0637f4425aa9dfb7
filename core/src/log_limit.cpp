#include "troupe/core/log_limit.hpp"

namespace troupe {

std::string log_limit::close_window(time_point now) {
  std::string s;
  if (held_back_ > 0) {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
    s = "... and " + std::to_string(held_back_) + " more like this in the last " +
        std::to_string(secs < 1 ? 1 : secs) + " s";
  }
  start_ = now;
  logged_ = 0;
  held_back_ = 0;
  return s;
}

log_limit::verdict log_limit::note(time_point now) {
  verdict v;
  if (!started_) {
    started_ = true;
    start_ = now;
  } else if (now >= window_end()) {
    v.summary = close_window(now);
  }
  if (logged_ < burst_) {
    ++logged_;
    v.log = true;
  } else {
    ++held_back_;
  }
  return v;
}

std::string log_limit::flush(time_point now, bool now_anyway) {
  if (!started_ || (now < window_end() && !now_anyway) || held_back_ == 0) return {};
  return close_window(now);
}

std::string printable_text(std::string_view text, std::size_t max) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max) return out.append("...");
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out.append("\\x").append(1, hex[c >> 4]).append(1, hex[c & 15]);
  }
  return out;
}

}  // namespace troupe
