#include "troupe/core/config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config_impl.hpp"
#include "troupe/core/shortest.hpp"

namespace troupe {

namespace config_detail {

std::vector<std::string> split_key(std::string_view dotted) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= dotted.size()) {
    size_t dot = dotted.find('.', start);
    if (dot == std::string_view::npos) dot = dotted.size();
    parts.emplace_back(dotted.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

const toml::node* lookup(const toml::table& t, std::string_view dotted) {
  if (dotted.empty()) return &t;
  const toml::node* n = &t;
  for (const auto& part : split_key(dotted)) {
    const auto* tbl = n->as_table();
    if (!tbl) return nullptr;
    n = tbl->get(part);
    if (!n) return nullptr;
  }
  return n;
}

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

}  // namespace config_detail

using config_detail::lookup;
using config_detail::split_key;

config_doc::config_doc() : impl_(std::make_shared<impl>()) {
  impl_->source = "<empty>";
}

expected<config_doc> config_doc::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_unexpected(core_errc::invalid_argument, path + ": is a directory, not a job file");
  // Without blocking in open(): a FIFO nobody writes reads as empty (`config check` of one waited
  // for good); one being written (`<(...)`) is read to its end. At most 4 MiB: /dev/zero read on.
  constexpr std::size_t most = 4u << 20;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return make_unexpected(core_errc::io_error, path + ": cannot open config file: " + std::strerror(errno));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[65536];
  ssize_t n = 0;
  while (text.size() <= most && ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)))
    if (n > 0) text.append(buf, static_cast<std::size_t>(n));
  const int err = errno;
  ::close(fd);
  if (n < 0)
    return make_unexpected(core_errc::io_error, path + ": cannot read config file: " + std::strerror(err));
  if (text.size() > most)
    return make_unexpected(core_errc::invalid_argument, path + ": more than 4 MiB: not a config file");
  return from_string(text, path);
}

expected<config_doc> config_doc::from_string(std::string_view text, std::string source) {
  config_doc doc;
  doc.impl_->source = std::move(source);
  try {
    doc.impl_->table = toml::parse(text, doc.impl_->source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << doc.impl_->source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    return make_unexpected(core_errc::parse_error, msg.str());
  }
  return doc;
}

namespace {
// An override's value as a TOML value (table {v = value}); anything that is not one is taken as a
// bare string, except a number beyond a double's range ("1e999"): the flag's error, not a string.
expected<toml::table> parse_override_value(std::string_view assignment, const std::string& value) {
  try {
    return toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    errno = 0;
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (!value.empty() && end == value.c_str() + value.size() && errno == ERANGE)
      return make_unexpected(core_errc::out_of_range, "--set " + std::string(assignment) + ": '" + value +
                                                          "' is beyond a number's range");
    return toml::table{{"v", value}};
  }
}
}  // namespace

expected<void> config_doc::apply_override(std::string_view assignment, std::string origin) {
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return make_unexpected(core_errc::invalid_argument,
                           "--set '" + std::string(assignment) + "': expected KEY=VALUE");
  std::string key(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  // A line break would end the value and begin TOML of its own, dropped unseen (`--set
  // $'job.workers=5\ntrain.epochs = 7'` set the workers alone).
  if (assignment.find_first_of("\n\r") != std::string_view::npos)
    return make_unexpected(core_errc::invalid_argument,
                           "--set '" + key + "=...': a line break in it (one KEY=VALUE a --set)");
  auto parts = split_key(key);
  for (const auto& p : parts)
    if (p.empty())
      return make_unexpected(core_errc::invalid_argument, "--set '" + key + "': empty key component");
  auto parsed = parse_override_value(assignment, value);
  if (!parsed) return parsed.err();
  // Copy on write: documents share their table.
  auto fresh = std::make_shared<impl>(*impl_);
  toml::table* t = &fresh->table;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto* n = t->get(parts[i]);
    if (!n) {
      t->insert(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    t = n->as_table();
    if (!t)
      return make_unexpected(core_errc::wrong_type, "--set '" + key + "': '" + parts[i] + "' is not a table");
  }
  t->insert_or_assign(parts.back(), *parsed->get("v"));
  std::erase_if(fresh->overridden, [&](const auto& o) { return o.first == key; });
  fresh->overridden.emplace_back(key,
                                 origin.empty() ? "--set " + std::string(assignment) : std::move(origin));
  impl_ = std::move(fresh);
  return {};
}

const std::string& config_doc::source() const {
  return impl_->source;
}
bool config_doc::has(std::string_view dotted_key) const {
  return lookup(impl_->table, dotted_key) != nullptr;
}
namespace {

// A float token (digits, '.', exponent) rewritten as the shortest text that reads back as the same
// double; anything else (an integer, a date, a hex number) unchanged.
std::string shortest(std::string_view token) {
  double v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc{} || end != token.data() + token.size() ||
      token.find_first_of(".eE") == std::string_view::npos)
    return std::string(token);
  std::string out = shortest_text(v);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";  // still a float in TOML
  return out;
}

// toml++ (as Debian builds it, without float charconv) writes every double at 17 digits
// (9.9999999999999995e-08 for 1e-7): the values after '=' outside strings are made shortest.
std::string shortest_floats(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  char quote = 0;
  bool value = false, escaped = false;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      out += c;
      if (escaped)
        escaped = false;
      else if (c == '\\' && quote == '"')
        escaped = true;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '=') value = true;
    if (c == '[' && value) ++depth;
    if (c == ']' && value && depth > 0) --depth;
    if (c == '\n' && depth == 0) value = false;
    const bool starts = value && (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+') &&
                        (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])));
    if (!starts) {
      out += c;
      continue;
    }
    std::size_t j = i + 1;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '.' ||
                               text[j] == '+' || text[j] == '-' || text[j] == '_' || text[j] == ':'))
      ++j;
    out += shortest(std::string_view(text).substr(i, j - i));
    i = j - 1;
  }
  return out;
}

}  // namespace

std::string config_doc::to_toml() const {
  std::ostringstream out;
  out << impl_->table;
  return shortest_floats(out.str());
}

// ---- config_reader / config_section ----
}  // namespace troupe
