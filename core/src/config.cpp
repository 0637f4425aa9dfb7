#include "troupe/core/config.hpp"
#include "troupe/core/nearest.hpp"

#include <algorithm>
#include <sstream>
#include <type_traits>

#include "config_impl.hpp"

namespace troupe {

using config_detail::lookup;
using config_detail::split_key;
using config_detail::type_name;

namespace {

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

config_reader::config_reader(const config_doc& doc) : doc_(doc) {
  effective_.impl_ = std::make_shared<config_doc::impl>(*doc.impl_);
}

namespace {
template <class T>
auto to_toml_value(const T& v) {
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>> ||
                std::is_same_v<T, std::vector<std::string>>) {
    toml::array a;
    for (const auto& e : v) a.push_back(e);
    return a;
  } else {
    return v;
  }
}
}  // namespace

template <class T>
void config_reader::note_default(const std::string& full_key, const T& value) {
  auto parts = split_key(full_key);
  toml::table* t = &effective_.impl_->table;
  for (std::size_t i = 0; t && i + 1 < parts.size(); ++i) {
    if (!t->contains(parts[i])) t->insert(parts[i], toml::table{});
    t = t->get(parts[i])->as_table();
  }
  if (t) t->insert(parts.back(), to_toml_value(value));
}

void config_reader::record(const std::string& full_key, core_errc code, const std::string& reason) {
  if (first_) return;
  first_ = error(code, doc_.where(full_key) + ": key '" + full_key + "': " + reason);
}

std::string config_doc::where(std::string_view dotted_key) const {
  const std::string full_key(dotted_key);
  // A key an override set (or one inside a table it set) is the flag's error.
  for (const auto& [key, origin] : impl_->overridden)
    if (full_key == key || (full_key.starts_with(key) && full_key[key.size()] == '.')) return origin;
  const auto* n = lookup(impl_->table, full_key);
  std::string where = source();
  if (n && n->source().begin.line > 0) where.append(":").append(std::to_string(n->source().begin.line));
  return where;
}

void config_reader::ignore(std::string_view path) {
  ignored_.emplace_back(path);
}

// "; did you mean 'train.epochs'?" when a key this reader knows is near `leaf` ("" otherwise).
std::string config_reader::hint(const std::string& leaf) const {
  auto near = nearest(leaf, read_);
  if (!near) {
    // The right name in another section (`train.strategy` for `job.strategy`): the one key of that
    // name, when only one section has it.
    const auto name = leaf.substr(leaf.rfind('.') + 1);
    std::vector<std::string> same;
    for (const auto& r : read_)
      if (r != leaf && r.size() > name.size() && r.ends_with("." + name) &&
          std::find(same.begin(), same.end(), r) == same.end())
        same.push_back(r);
    if (same.size() == 1) near = same.front();
  }
  return near ? "; did you mean '" + *near + "'?" : std::string();
}

expected<void> config_reader::finish(bool reject_unknown) {
  if (first_) return first_;
  if (!reject_unknown) return {};
  std::vector<std::string> leaves;
  collect_leaves(doc_.get_impl().table, "", leaves);
  for (const auto& leaf : leaves) {
    // An empty table is known when keys are read under it: `[job]` alone is a section with every
    // default (it was "key 'job': unknown key").
    bool known = std::any_of(read_.begin(), read_.end(), [&](const auto& r) { return under(r, leaf); }) ||
                 std::any_of(ignored_.begin(), ignored_.end(), [&](const auto& p) { return under(leaf, p); });
    if (!known) {
      auto w = std::find_if(read_with_.begin(), read_with_.end(),
                            [&](const auto& k) { return under(leaf, k.first); });
      record(leaf, core_errc::unknown_key,
             w != read_with_.end() ? "not read here: " + w->second
                                   : "unknown key (misspelt, or not valid in this section)" + hint(leaf));
      return first_;
    }
  }
  return {};
}

void config_section::read_with(std::string_view key, const std::string& when) {
  reader_->read_with_.emplace_back(full_key(key), when);
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
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
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
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
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
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
  if (!n->is_boolean()) {
    reader_->record(full, core_errc::wrong_type, std::string("expected true or false, got ") + type_name(*n));
    return def;
  }
  return n->as_boolean()->get();
}

std::string config_section::get_string(std::string_view key, const std::string& def) {
  TROUPE_FETCH();
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
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
  TROUPE_FETCH();
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  // `batch = 64` for `batch_size = 64`: the choices, not only the type, tell what the key wants.
  if (n && !n->is_string()) {
    reader_->record(full, core_errc::wrong_type,
                    std::string("expected one of ")
                        .append(list)
                        .append(" (a quoted string), got ")
                        .append(type_name(*n)));
    return def;
  }
  if (!n) reader_->note_default(full, def);
  std::string v = n ? n->as_string()->get() : def;
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return v;
  reader_->record(full, core_errc::out_of_range, "'" + v + "' is not one of: " + list);
  return def;
}

std::vector<config_section::i64> config_section::get_ints(std::string_view key, const std::vector<i64>& def) {
  TROUPE_FETCH();
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
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
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
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

std::vector<double> config_section::get_doubles(std::string_view key, const std::vector<double>& def) {
  TROUPE_FETCH();
  if (!n) {
    reader_->note_default(full, def);
    return def;
  }
  const auto* arr = n->as_array();
  std::vector<double> out;
  for (std::size_t i = 0; arr && i < arr->size(); ++i) {
    const auto& e = *arr->get(i);
    if (e.is_floating_point())
      out.push_back(e.as_floating_point()->get());
    else if (e.is_integer())
      out.push_back(static_cast<double>(e.as_integer()->get()));
    else
      arr = nullptr;
  }
  if (!arr) {
    reader_->record(full, core_errc::wrong_type, "expected an array of numbers");
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
