#include "csv_row.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "troupe/nn/data/readers.hpp"

namespace troupe::job {

namespace {

std::string quoted(std::string_view text) {
  std::string out(1, '\'');
  return out.append(text).append(1, '\'');
}

unexpected bad_value(const row_codec& c, std::size_t col, const std::string& file, std::size_t line,
                     const std::string& why) {
  std::string text = file;
  if (line > 0) text.append(":").append(std::to_string(line));
  if (!text.empty()) text.append(": ");
  text.append("column '").append(c.cols.names[col]).append("'");
  if (c.positions) text.append(" (").append(std::to_string(col + 1)).append(")");
  text.append(": ");
  return make_unexpected(core_errc::invalid_argument, text.append(why));
}

// A missing value refused: an import says which --missing accepts it; a trained model's rows were
// imported under --missing error (the rule the model keeps), which nothing given later can change.
std::string missing_hint(const row_codec& c, const char* what, std::string_view text, bool zero_allowed) {
  std::string out("missing ");
  out.append(what);
  if (!text.empty()) out.append(" ").append(quoted(text));
  if (!c.import)
    return out.append(" (the model's data was imported with --missing error: every value is needed)");
  return out.append(" (--missing ")
      .append(zero_allowed ? "zero, mean or " : "")
      .append("skip-row accepts it)");
}

float scaled(double v, const dense_scale& s) {
  if (!s.on) return static_cast<float>(v);
  const double centred = v - s.mean;
  return static_cast<float>(s.std > 0 ? centred / s.std : centred);
}

expected<void> read_label(const std::vector<std::string>& fields, const row_codec& c, storage::record& r,
                          row_outcome& out, const std::string& file, std::size_t line) {
  const std::size_t col = *c.cols.label;
  out.label = trimmed(fields[col]);
  if (is_missing(out.label)) {
    if (!c.label_required) return {};
    if (c.missing != missing_policy::skip_row)
      return bad_value(c, col, file, line, missing_hint(c, "label", out.label, false));
    out.kept = false;
    out.missing_column = col;
    return {};
  }
  if (!c.labels) return {};
  if (!c.labels->id(out.label, r.label))
    return bad_value(c, col, file, line,
                     "label " + quoted(out.label) + " is not " + c.labels->expected_text());
  out.labelled = true;
  return {};
}

expected<void> read_dense(const std::vector<std::string>& fields, const row_codec& c, storage::record& r,
                          row_outcome& out, const std::string& file, std::size_t line) {
  r.dense.resize(c.cols.dense.size());
  for (std::size_t k = 0; k < c.cols.dense.size(); ++k) {
    const std::size_t col = c.cols.dense[k];
    std::string_view text = trimmed(fields[col]);
    double v = 0;
    if (is_missing(text)) {
      if (c.missing == missing_policy::skip_row) {
        out.kept = false;
        out.missing_column = col;
        return {};
      }
      if (c.missing == missing_policy::error)
        return bad_value(c, col, file, line, missing_hint(c, "value", text, true));
      ++out.filled;
      if (c.missing == missing_policy::mean)
        v = c.fills.empty() ? std::numeric_limits<double>::quiet_NaN() : c.fills[k];
    } else if (!c.parse_dense) {
      continue;
    } else if (float x = 0; !parse_number(text, x)) {
      return bad_value(c, col, file, line, not_a_number(text));
    } else {
      v = x;
    }
    r.dense[k] = c.scales.empty() ? v : scaled(v, c.scales[k]);
  }
  return {};
}

}  // namespace

expected<row_outcome> to_record(const std::vector<std::string>& fields, const row_codec& c,
                                storage::record& r, const std::string& file, std::size_t line) {
  row_outcome out;
  r.label = 0;
  if (c.cols.label) {
    if (auto l = read_label(fields, c, r, out, file, line); !l) return l.err();
    if (!out.kept) return out;
  }
  if (auto d = read_dense(fields, c, r, out, file, line); !d) return d.err();
  if (!out.kept) return out;
  r.sparse.resize(c.cols.sparse.size());
  for (std::size_t f = 0; c.hash_sparse && f < c.cols.sparse.size(); ++f)
    r.sparse[f] = nn::category_id(fields[c.cols.sparse[f]], f, c.buckets_per_field);
  return out;
}

const char* missing_name(missing_policy p) {
  switch (p) {
    case missing_policy::zero:
      return "zero";
    case missing_policy::mean:
      return "mean";
    case missing_policy::skip_row:
      return "skip-row";
    default:
      return "error";
  }
}

namespace {

unexpected bad(const std::string& where, const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, where + ": " + why);
}

expected<void> check_rules(const storage::row_format& f, const std::string& where) {
  if (!parse_missing_policy(f.missing))
    return bad(where, "missing policy '" + f.missing + "': expected error, zero, mean or skip-row");
  if (f.missing == "mean" && f.fill.size() != f.dense.size())
    return bad(where, "missing policy 'mean' needs one fill value per dense column (" +
                          std::to_string(f.fill.size()) + " for " + std::to_string(f.dense.size()) + ")");
  if (f.missing != "mean" && !f.fill.empty())
    return bad(where, "fill values are for missing policy 'mean', not '" + f.missing + "'");
  for (std::size_t k = 0; k < f.fill.size(); ++k)
    if (!std::isfinite(f.fill[k])) return bad(where, "fill value of '" + f.dense[k] + "' is not finite");
  if (f.hash != storage::category_hash_v1)
    return bad(where, "hash '" + f.hash + "': this build knows " + storage::category_hash_v1);
  if (f.delimiter == '"' || f.delimiter == '\n' || f.delimiter == '\r')
    return bad(where, "the delimiter cannot be a quote or a line break");
  if (!f.sparse.empty() && f.buckets_per_field < 2)
    return bad(where, "sparse columns need buckets_per_field >= 2");
  if (std::set<std::string>(f.class_names.begin(), f.class_names.end()).size() != f.class_names.size())
    return bad(where, "class_names holds a name twice");
  return {};
}

expected<std::vector<dense_scale>> scales_of(const storage::row_format& f, const std::string& where) {
  std::vector<dense_scale> scales;
  if (f.standardize.empty()) return scales;
  scales.resize(f.dense.size());
  for (const auto& s : f.standardize) {
    auto it = std::find(f.dense.begin(), f.dense.end(), s.column);
    if (it == f.dense.end())
      return bad(where, "standardized column '" + s.column + "' is not a dense column");
    if (!std::isfinite(s.mean) || !std::isfinite(s.std) || s.std < 0)
      return bad(where, "standardized column '" + s.column + "': mean and std must be finite, std >= 0");
    scales[static_cast<std::size_t>(it - f.dense.begin())] = {true, s.mean, s.std};
  }
  return scales;
}

}  // namespace

expected<row_codec> make_codec(const storage::row_format& f, const std::vector<std::string>& header,
                               bool label_required, const std::string& where) {
  if (auto r = check_rules(f, where); !r) return r.err();
  auto scales = scales_of(f, where);
  if (!scales) return scales.err();
  auto cols = bind_columns(header, f, where);
  if (!cols) return cols.err();
  if (label_required && !cols->label) return bad(where, "label column '" + f.label + "': no such column");
  row_codec c;
  c.cols = std::move(*cols);
  c.missing = *parse_missing_policy(f.missing);
  c.buckets_per_field = f.buckets_per_field;
  c.labels = label_codec(f.class_names);
  c.scales = std::move(*scales);
  c.fills = f.fill;
  c.label_required = label_required;
  return c;
}

}  // namespace troupe::job
