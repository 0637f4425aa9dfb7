#include "manifest_toml.hpp"

#include <charconv>
#include <cstdio>

namespace troupe::storage {

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", u);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string toml_float(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  return ec == std::errc{} ? std::string(buf, end) : "nan";
}

namespace {

void write_list(std::ostream& o, const char* key, const std::vector<std::string>& names) {
  o << key << " = [";
  for (std::size_t i = 0; i < names.size(); ++i) o << (i ? ", " : "") << toml_string(names[i]);
  o << "]\n";
}

void write_scales(std::ostream& o, const std::vector<column_scale>& scales) {
  std::vector<std::string> names;
  for (const auto& s : scales) names.push_back(s.column);
  write_list(o, "standardize", names);
  o << "mean = [";
  for (std::size_t i = 0; i < scales.size(); ++i) o << (i ? ", " : "") << toml_float(scales[i].mean);
  o << "]\nstd = [";
  for (std::size_t i = 0; i < scales.size(); ++i) o << (i ? ", " : "") << toml_float(scales[i].std);
  o << "]\n";
}

}  // namespace

void write_columns(std::ostream& o, const row_format& f) {
  o << "\n[columns]\n";
  write_list(o, "header", f.header);
  o << "label = " << toml_string(f.label) << "\n";
  write_list(o, "dense", f.dense);
  write_list(o, "sparse", f.sparse);
  o << "delimiter = " << toml_string(std::string(1, f.delimiter)) << "\n"
    << "missing = " << toml_string(f.missing) << "\n"
    << "hash = " << toml_string(f.hash) << "\n";
  if (!f.class_names.empty()) write_list(o, "class_names", f.class_names);
  if (!f.standardize.empty()) write_scales(o, f.standardize);
  if (!f.fill.empty()) {
    o << "fill = [";
    for (std::size_t i = 0; i < f.fill.size(); ++i) o << (i ? ", " : "") << toml_float(f.fill[i]);
    o << "]\n";
  }
}

row_format read_columns(config_section s, std::uint64_t buckets_per_field) {
  row_format f;
  f.header = s.get_strings("header", {});
  f.label = s.require_string("label");
  f.dense = s.get_strings("dense", {});
  f.sparse = s.get_strings("sparse", {});
  const auto delimiter = s.require_string("delimiter");
  if (delimiter.size() != 1) s.fail("delimiter", core_errc::out_of_range, "expected one character");
  f.delimiter = delimiter.empty() ? ',' : delimiter[0];
  f.missing = s.get_enum("missing", "error", {"error", "zero", "mean", "skip-row"});
  f.hash = s.require_string("hash");
  f.buckets_per_field = buckets_per_field;
  f.class_names = s.get_strings("class_names", {});
  const auto names = s.get_strings("standardize", {});
  const auto mean = s.get_doubles("mean", {}), std = s.get_doubles("std", {});
  if (mean.size() != names.size() || std.size() != names.size())
    s.fail("standardize", core_errc::out_of_range, "needs one mean and one std per column");
  else
    for (std::size_t i = 0; i < names.size(); ++i) f.standardize.push_back({names[i], mean[i], std[i]});
  f.fill = s.get_doubles("fill", {});
  if (f.missing == "mean" && f.fill.size() != f.dense.size())
    s.fail("fill", core_errc::out_of_range, "missing = \"mean\" needs one fill value per dense column");
  return f;
}

}  // namespace troupe::storage
