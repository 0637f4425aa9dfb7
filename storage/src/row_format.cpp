#include "troupe/storage/row_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace troupe::storage {

namespace {

std::string listed(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return "(" + s + ")";
}

bool near(double x, double y) {
  return std::abs(x - y) <= 1e-6 * std::max({1.0, std::abs(x), std::abs(y)});
}

std::optional<column_scale> scale_of(const row_format& f, const std::string& column) {
  for (const auto& s : f.standardize)
    if (s.column == column) return s;
  return std::nullopt;
}

std::string scale_text(const std::optional<column_scale>& s) {
  if (!s) return "not standardized";
  char t[96];
  std::snprintf(t, sizeof t, "standardized with mean %.6g and std %.6g", s->mean, s->std);
  return t;
}

std::string class_difference(const row_format& a, const row_format& b, const std::string& an,
                             const std::string& bn) {
  if (a.class_names == b.class_names) return "";
  if (a.class_names.size() == b.class_names.size())
    for (std::size_t i = 0; i < a.class_names.size(); ++i)
      if (a.class_names[i] != b.class_names[i])
        return "class " + std::to_string(i) + " is '" + a.class_names[i] + "' in " + an + ", '" +
               b.class_names[i] + "' in " + bn;
  return "the classes are " + (a.class_names.empty() ? std::string("unnamed") : listed(a.class_names)) +
         " in " + an + ", " + (b.class_names.empty() ? std::string("unnamed") : listed(b.class_names)) +
         " in " + bn;
}

std::string scaling_difference(const row_format& a, const row_format& b, const std::string& an,
                               const std::string& bn) {
  for (const auto& c : a.dense) {
    const auto x = scale_of(a, c), y = scale_of(b, c);
    if (x.has_value() != y.has_value() || (x && (!near(x->mean, y->mean) || !near(x->std, y->std))))
      return "the dense column '" + c + "' is " + scale_text(x) + " in " + an + ", " + scale_text(y) +
             " in " + bn;
  }
  if (a.missing != b.missing)
    return "a missing value reads by the rule '" + a.missing + "' in " + an + ", '" + b.missing + "' in " +
           bn;
  for (std::size_t i = 0; i < a.fill.size() && i < b.fill.size() && i < a.dense.size(); ++i)
    if (!near(a.fill[i], b.fill[i]))
      return "a missing '" + a.dense[i] + "' reads as " + std::to_string(a.fill[i]) + " in " + an + ", " +
             std::to_string(b.fill[i]) + " in " + bn;
  return "";
}

}  // namespace

std::string encoding_difference(const row_format& a, const row_format& b, const std::string& an,
                                const std::string& bn, encoding_parts parts) {
  if (parts.classes)
    if (auto d = class_difference(a, b, an, bn); !d.empty()) return d;
  if (a.dense != b.dense)
    return "the dense columns are " + listed(a.dense) + " in " + an + ", " + listed(b.dense) + " in " + bn;
  if (a.sparse != b.sparse)
    return "the sparse columns are " + listed(a.sparse) + " in " + an + ", " + listed(b.sparse) + " in " + bn;
  if (a.hash != b.hash || a.buckets_per_field != b.buckets_per_field)
    return "categorical text is hashed as " + a.hash + " into " + std::to_string(a.buckets_per_field) +
           " ids a column in " + an + ", as " + b.hash + " into " + std::to_string(b.buckets_per_field) +
           " in " + bn;
  return parts.scaling ? scaling_difference(a, b, an, bn) : "";
}

}  // namespace troupe::storage
