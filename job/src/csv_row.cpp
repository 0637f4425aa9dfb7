#include "csv_row.hpp"

#include <charconv>
#include <cmath>
#include <string_view>

#include "troupe/nn/data/readers.hpp"

namespace troupe::job {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view text) {
  std::string out(1, '\'');
  return out.append(text).append(1, '\'');
}

unexpected bad_value(const nn::csv_line& line, const csv_columns& c, std::size_t col, const row_rules& rules,
                     const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, rules.file + ":" + std::to_string(line.number) +
                                                          ": column '" + c.names[col] + "' (" +
                                                          std::to_string(col + 1) + "): " + why);
}

std::string missing_hint(const char* what, bool zero_allowed) {
  return std::string("missing ") + what + " (--missing " + (zero_allowed ? "zero or " : "") +
         "skip-row accepts it)";
}

bool parse_class(std::string_view text, float& out) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || v > max_class_id) return false;
  out = static_cast<float>(v);
  return true;
}

bool parse_number(std::string_view text, float& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size() && std::isfinite(out);
}

}  // namespace

expected<bool> to_record(const nn::csv_line& line, const csv_columns& c, const row_rules& rules,
                         storage::record& r) {
  const bool skip = rules.missing == missing_policy::skip_row;
  std::string_view label = trimmed(line.fields[c.label]);
  if (label.empty()) {
    if (skip) return false;
    return bad_value(line, c, c.label, rules, missing_hint("label", false));
  }
  if (!parse_class(label, r.label))
    return bad_value(line, c, c.label, rules,
                     "label " + quoted(label) + " is not a class id (an integer from 0 to " +
                         std::to_string(max_class_id) + ")");
  r.dense.resize(c.dense.size());
  for (std::size_t k = 0; k < c.dense.size(); ++k) {
    std::string_view text = trimmed(line.fields[c.dense[k]]);
    if (text.empty()) {
      if (skip) return false;
      if (rules.missing == missing_policy::error)
        return bad_value(line, c, c.dense[k], rules, missing_hint("value", true));
      r.dense[k] = 0;
    } else if (!parse_number(text, r.dense[k])) {
      return bad_value(line, c, c.dense[k], rules, quoted(text) + " is not a number");
    }
  }
  r.sparse.resize(c.sparse.size());
  for (std::size_t f = 0; f < c.sparse.size(); ++f)
    r.sparse[f] = nn::category_id(line.fields[c.sparse[f]], f, rules.buckets_per_field);
  return true;
}

}  // namespace troupe::job
