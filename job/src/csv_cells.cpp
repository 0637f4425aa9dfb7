#include "csv_cells.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace troupe::job {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

namespace {
bool same_letters(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}
}  // namespace

bool is_missing(std::string_view text) {
  if (text.empty()) return true;
  if (text.size() > 4) return false;
  std::string_view unsigned_text = text;
  if (text.front() == '+' || text.front() == '-') unsigned_text.remove_prefix(1);
  return same_letters(unsigned_text, "nan") || same_letters(text, "na") || same_letters(text, "n/a") ||
         same_letters(text, "null");
}

bool parse_class_id(std::string_view text, std::uint32_t& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size() && out <= max_class_id;
}

namespace {
// `text` whole as a long double (wider than any value a cell means); nullopt: not a number, or past
// even that range.
std::optional<long double> wide_number(std::string_view text) {
  long double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}
}  // namespace

bool parse_number(std::string_view text, float& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec == std::errc{}) return p == text.data() + text.size() && std::isfinite(out);
  if (ec != std::errc::result_out_of_range) return false;
  // Out of FP32's range: too large is refused (not_a_number says so); too small for it (1e-320,
  // below its least subnormal) is FP32's nearest value, 0 or a subnormal, as numpy's float32() reads
  // it (it was refused as "beyond FP32's range (about -3.4e38 to 3.4e38)").
  const auto wide = wide_number(text);
  if (!wide || std::fabs(*wide) > std::numeric_limits<float>::max()) return false;
  out = static_cast<float>(*wide);
  return true;
}

std::string shown(std::string_view text) {
  constexpr std::size_t keep = 60;
  std::string out(1, '\'');
  if (text.size() <= keep) return out.append(text).append(1, '\'');
  // Cut at a character's start, not inside a UTF-8 sequence.
  std::size_t cut = keep;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return out.append(text.substr(0, cut))
      .append("...' (")
      .append(std::to_string(text.size()))
      .append(" bytes)");
}

std::string not_a_number(std::string_view text) {
  // 1e309 (past even a double's range) said "is not a number".
  long double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool whole = p == text.data() + text.size();
  const bool beyond =
      whole && ((ec == std::errc{} && std::isfinite(v)) || ec == std::errc::result_out_of_range);
  return shown(text).append(beyond ? " is beyond FP32's range (about -3.4e38 to 3.4e38)"
                                   : " is not a number");
}

label_codec::label_codec(std::vector<std::string> names) : names_(std::move(names)) {
  for (std::size_t i = 0; i < names_.size(); ++i) ids_.emplace(names_[i], static_cast<std::uint32_t>(i));
}

bool label_codec::id(std::string_view text, float& out) const {
  if (names_.empty()) {
    std::uint32_t v = 0;
    if (!parse_class_id(text, v) || (limit_ > 0 && v >= limit_)) return false;
    out = static_cast<float>(v);
    return true;
  }
  auto it = ids_.find(text);
  if (it == ids_.end()) return false;
  out = static_cast<float>(it->second);
  return true;
}

std::string label_codec::expected_text() const {
  if (names_.empty() && limit_ > 0)
    return "a class id of the " + std::to_string(limit_) + " classes (an integer from 0 to " +
           std::to_string(limit_ - 1) + ")";
  if (names_.empty()) return "a class id (an integer from 0 to " + std::to_string(max_class_id) + ")";
  std::string out = "one of the " + std::to_string(names_.size()) + " classes (";
  for (std::size_t i = 0; i < names_.size() && i < 10; ++i) out += (i ? ", " : "") + names_[i];
  return out + (names_.size() > 10 ? ", ...)" : ")");
}

namespace {
// The bytes of the sequence that starts with `c` (0: no sequence starts so), and the range its
// second byte must be in (no overlong forms, surrogates or code points past U+10FFFF).
std::size_t sequence(unsigned char c, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xbf;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return 2;
  if (c >= 0xe0 && c <= 0xef) {
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    return 4;
  }
  return 0;
}
}  // namespace

bool is_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    unsigned char lo = 0, hi = 0;
    const std::size_t n = sequence(static_cast<unsigned char>(s[i]), lo, hi);
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace troupe::job
