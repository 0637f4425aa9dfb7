#include "troupe/core/config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

namespace troupe {

struct config_doc::impl {
  toml::table table;
  std::string source;
};

namespace {

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

void collect_leaves(const toml::table& t, const std::string& prefix, std::vector<std::string>& out) {
  for (auto&& [k, v] : t) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table()) {
      if (sub->empty()) out.push_back(key);
      collect_leaves(*sub, key, out);
    } else {
      out.push_back(key);
    }
  }
}

bool under(const std::string& key, const std::string& prefix) {
  if (prefix.empty()) return true;
  return key == prefix || (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
                           key[prefix.size()] == '.');
}

}  // namespace

config_doc::config_doc() : impl_(std::make_shared<impl>()) {
  impl_->source = "<empty>";
}

expected<config_doc> config_doc::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_unexpected(core_errc::invalid_argument, path + ": is a directory, not a job file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_unexpected(core_errc::io_error, path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_string(ss.str(), path);
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

expected<void> config_doc::apply_override(std::string_view assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return make_unexpected(core_errc::invalid_argument,
                           "--set '" + std::string(assignment) + "': expected KEY=VALUE");
  std::string key(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  auto parts = split_key(key);
  for (const auto& p : parts)
    if (p.empty())
      return make_unexpected(core_errc::invalid_argument, "--set '" + key + "': empty key component");
  // Parse the value as TOML; anything that is not a TOML value is taken as a bare string.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};
  }
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
  t->insert_or_assign(parts.back(), *parsed.get("v"));
  impl_ = std::move(fresh);
  return {};
}

const std::string& config_doc::source() const {
  return impl_->source;
}
bool config_doc::has(std::string_view dotted_key) const {
  return lookup(impl_->table, dotted_key) != nullptr;
}
std::string config_doc::to_toml() const {
  std::ostringstream out;
  out << impl_->table;
  return out.str();
}

// ---- config_reader / config_section ----

config_reader::config_reader(const config_doc& doc) : doc_(doc) {}

void config_reader::record(const std::string& full_key, core_errc code, const std::string& reason) {
  if (first_) return;
  const auto* n = lookup(doc_.get_impl().table, full_key);
  std::string where = doc_.source();
  if (n && n->source().begin.line > 0) where += ":" + std::to_string(n->source().begin.line);
  first_ = error(code, where + ": key '" + full_key + "': " + reason);
}

void config_reader::ignore(std::string_view path) {
  ignored_.emplace_back(path);
}

expected<void> config_reader::finish(bool reject_unknown) {
  if (first_) return first_;
  if (!reject_unknown) return {};
  std::vector<std::string> leaves;
  collect_leaves(doc_.get_impl().table, "", leaves);
  for (const auto& leaf : leaves) {
    bool known = std::any_of(read_.begin(), read_.end(), [&](const auto& r) { return r == leaf; }) ||
                 std::any_of(ignored_.begin(), ignored_.end(), [&](const auto& p) { return under(leaf, p); });
    if (!known) {
      record(leaf, core_errc::unknown_key, "unknown key (misspelt, or not valid in this section)");
      return first_;
    }
  }
  return {};
}

std::string config_section::full_key(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool config_section::has(std::string_view key) const {
  return lookup(reader_->doc_.get_impl().table, full_key(key)) != nullptr;
}

void config_section::fail(std::string_view key, core_errc code, const std::string& reason) {
  reader_->record(full_key(key), code, reason);
}

namespace {
// Finds the node and marks the key read; null when absent.
const toml::node* fetch(config_reader* r, const std::string& full, const toml::table& t,
                        std::vector<std::string>& read) {
  read.push_back(full);
  return lookup(t, full);
}
}  // namespace

#define TROUPE_FETCH()              \
  std::string full = full_key(key); \
  const toml::node* n = fetch(reader_, full, reader_->doc_.get_impl().table, reader_->read_)

config_section::i64 config_section::get_int(std::string_view key, i64 def, i64 min, i64 max) {
  TROUPE_FETCH();
  if (!n) return def;
  auto v = n->value_exact<int64_t>();
  if (!v) {
    reader_->record(full, core_errc::wrong_type, std::string("expected an integer, got ") + type_name(*n));
    return def;
  }
  if (*v < min || *v > max) {
    reader_->record(
        full, core_errc::out_of_range,
        std::to_string(*v) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return def;
  }
  return *v;
}

config_section::i64 config_section::require_int(std::string_view key, i64 min, i64 max) {
  if (!has(key)) {
    reader_->record(full_key(key), core_errc::missing_key, "required integer is missing");
    return min < 0 && max > 0 ? 0 : min;
  }
  return get_int(key, 0, min, max);
}

double config_section::get_double(std::string_view key, double def, double min, double max) {
  TROUPE_FETCH();
  if (!n) return def;
  std::optional<double> v;
  if (n->is_floating_point())
    v = n->as_floating_point()->get();
  else if (n->is_integer())
    v = static_cast<double>(n->as_integer()->get());
  if (!v) {
    reader_->record(full, core_errc::wrong_type, std::string("expected a number, got ") + type_name(*n));
    return def;
  }
  if (!(*v >= min && *v <= max)) {
    std::ostringstream m;
    m << *v << " is outside [" << min << ", " << max << "]";
    reader_->record(full, core_errc::out_of_range, m.str());
    return def;
  }
  return *v;
}

bool config_section::get_bool(std::string_view key, bool def) {
  TROUPE_FETCH();
  if (!n) return def;
  if (!n->is_boolean()) {
    reader_->record(full, core_errc::wrong_type, std::string("expected true or false, got ") + type_name(*n));
    return def;
  }
  return n->as_boolean()->get();
}

std::string config_section::get_string(std::string_view key, const std::string& def) {
  TROUPE_FETCH();
  if (!n) return def;
  if (!n->is_string()) {
    reader_->record(full, core_errc::wrong_type, std::string("expected a string, got ") + type_name(*n));
    return def;
  }
  return n->as_string()->get();
}

std::string config_section::require_string(std::string_view key) {
  if (!has(key)) {
    reader_->record(full_key(key), core_errc::missing_key, "required string is missing");
    return {};
  }
  return get_string(key, {});
}

std::string config_section::get_enum(std::string_view key, const std::string& def,
                                     std::initializer_list<std::string_view> allowed) {
  std::string v = get_string(key, def);
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return v;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  reader_->record(full_key(key), core_errc::out_of_range, "'" + v + "' is not one of: " + list);
  return def;
}

std::vector<config_section::i64> config_section::get_ints(std::string_view key, const std::vector<i64>& def) {
  TROUPE_FETCH();
  if (!n) return def;
  const auto* arr = n->as_array();
  std::vector<i64> out;
  if (arr) {
    for (const auto& e : *arr) {
      auto v = e.value_exact<int64_t>();
      if (!v) {
        arr = nullptr;
        break;
      }
      out.push_back(*v);
    }
  }
  if (!arr) {
    reader_->record(full, core_errc::wrong_type, "expected an array of integers");
    return def;
  }
  return out;
}

std::vector<std::string> config_section::get_strings(std::string_view key,
                                                     const std::vector<std::string>& def) {
  TROUPE_FETCH();
  if (!n) return def;
  const auto* arr = n->as_array();
  std::vector<std::string> out;
  if (arr) {
    for (const auto& e : *arr) {
      if (!e.is_string()) {
        arr = nullptr;
        break;
      }
      out.push_back(e.as_string()->get());
    }
  }
  if (!arr) {
    reader_->record(full, core_errc::wrong_type, "expected an array of strings");
    return def;
  }
  return out;
}

config_section config_section::section(std::string_view key) {
  std::string full = full_key(key);
  const auto* n = lookup(reader_->doc_.get_impl().table, full);
  if (n && !n->is_table())
    reader_->record(full, core_errc::wrong_type, std::string("expected a table, got ") + type_name(*n));
  return config_section(reader_, full);
}

#undef TROUPE_FETCH

}  // namespace troupe
