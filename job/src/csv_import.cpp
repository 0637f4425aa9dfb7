#include "troupe/job/csv_import.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "csv_labels.hpp"
#include "csv_output.hpp"
#include "csv_pass.hpp"
#include "csv_row.hpp"
#include "csv_stats.hpp"
#include "troupe/core/splitmix.hpp"

namespace troupe::job {

namespace {

namespace fs = std::filesystem;

unexpected bad(const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, why);
}

std::vector<std::string> names_of(const csv_columns& c, const std::vector<std::size_t>& cols) {
  std::vector<std::string> out;
  for (auto i : cols) out.push_back(c.names[i]);
  return out;
}

// What the first pass learns of the rows.
struct survey {
  std::uint64_t kept = 0, skipped_missing = 0, filled = 0;
  malformed_lines malformed;
  std::vector<std::uint64_t> hashes;  // one per kept row, with a split
  column_stats stats;                 // every kept row, taking statistics without a split
};

class importer {
 public:
  explicit importer(const csv_import_options& o) : o_(o), outputs_(o) {}

  expected<csv_import_result> run() {
    return imported_or_discarded(outputs_, result_, [this] { return import(); });
  }

 private:
  expected<void> import();
  expected<void> plan(const std::vector<std::string>& header);
  expected<std::vector<std::size_t>> standardized_columns() const;
  expected<void> first_pass();
  expected<void> survey_row(const nn::csv_line& line);
  expected<void> check_rows();
  expected<void> choose_split();
  expected<void> stats_pass();
  expected<void> finish_format();
  expected<void> take_fills();
  expected<void> write_pass();
  void note_large_columns(const std::vector<float>& largest);
  expected<csv_pass> reopen();
  bool split() const { return o_.test_fraction > 0; }
  // Means (and deviations) of the dense columns are taken: to standardize, or to fill with.
  bool stats() const { return o_.standardize || o_.missing == missing_policy::mean; }
  column_stats new_stats() const {
    std::vector<std::size_t> every(cols_.dense.size());
    std::iota(every.begin(), every.end(), std::size_t{0});
    return column_stats(std::move(every));
  }
  bool to_test(std::size_t line) const { return split() && splitmix64(line ^ o_.split_seed) <= threshold_; }

  const csv_import_options& o_;
  csv_columns cols_;
  storage::row_format format_;
  row_codec codec_;  // the first pass's (labels unknown, nothing standardized), then the last's
  std::optional<label_survey> labels_;
  std::vector<std::size_t> scaled_;  // dense indices of the standardized columns
  survey survey_;
  std::uint64_t threshold_ = 0;  // the test rows' largest hash
  storage::record record_;
  csv_outputs outputs_;
  csv_import_result result_;
};

expected<void> importer::import() {
  if (auto r = first_pass(); !r) return r;
  if (auto r = check_rows(); !r) return r;
  if (auto r = choose_split(); !r) return r;
  if (split() && stats())
    if (auto r = stats_pass(); !r) return r;
  if (auto r = finish_format(); !r) return r;
  if (auto r = write_pass(); !r) return r;
  auto m = outputs_.finish(result_.num_classes, format_);
  if (!m) return m.err();
  result_.train = m->first;
  result_.test = m->second;
  return {};
}

expected<std::vector<std::size_t>> importer::standardized_columns() const {
  std::vector<std::size_t> out;
  const auto& dense = result_.dense_columns;
  if (o_.standardize->empty())
    for (std::size_t k = 0; k < dense.size(); ++k) out.push_back(k);
  for (const auto& name : *o_.standardize) {
    auto it = std::find(dense.begin(), dense.end(), name);
    if (it == dense.end())
      return bad(o_.file + ": --standardize: '" + name +
                 "' is not a dense column (dense: " + joined(dense, ", ") + ")");
    const auto k = static_cast<std::size_t>(it - dense.begin());
    if (std::find(out.begin(), out.end(), k) != out.end())
      return bad(o_.file + ": --standardize: '" + name + "' is given twice");
    out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  return out;
}

expected<void> importer::plan(const std::vector<std::string>& header) {
  auto c = plan_columns(header, o_.label, o_.dense, o_.sparse, o_.file);
  if (!c) return c.err();
  cols_ = std::move(*c);
  // Rows of the label alone: nothing to learn from (the import wrote them, and the job failed on
  // "layer 'logits_sum' takes at least 1 inputs, got 0").
  if (cols_.dense.empty() && cols_.sparse.empty())
    return bad(o_.file + ": no feature column (" +
               (header.size() == 1 ? std::string("the header holds the label alone")
                                   : "--dense and --sparse name none, and every other column is ignored") +
               "): nothing to learn from");
  result_.dense_columns = names_of(cols_, cols_.dense);
  result_.sparse_columns = names_of(cols_, cols_.sparse);
  result_.ignored_columns = names_of(cols_, cols_.ignored);
  if (o_.standardize) {
    auto s = standardized_columns();
    if (!s) return s.err();
    scaled_ = std::move(*s);
  }
  format_.header = header;
  format_.label = o_.label;
  format_.dense = result_.dense_columns;
  format_.sparse = result_.sparse_columns;
  format_.delimiter = o_.delimiter;
  format_.missing = missing_name(o_.missing);
  format_.buckets_per_field = cols_.sparse.empty() ? 0 : o_.buckets_per_field;
  if (o_.missing == missing_policy::mean) format_.fill.assign(cols_.dense.size(), 0.0);
  auto codec = make_codec(format_, header, true, o_.file);
  if (!codec) return codec.err();
  codec_ = std::move(*codec);
  codec_.fills.clear();  // a missing value reads as NaN until the means are known
  // The first pass checks every row for what it must count (missing values, labels); it parses
  // numbers only for statistics it takes itself (the last pass parses and checks them all).
  codec_.labels.reset();
  codec_.parse_dense = stats() && !split();
  codec_.hash_sparse = false;
  labels_.emplace(o_.file, "column '" + o_.label + "' (" + std::to_string(*cols_.label + 1) + ")");
  return {};
}

expected<void> importer::first_pass() {
  auto p = csv_pass::open(o_.file, o_.delimiter);
  if (!p) return p.err();
  if (auto r = plan(p->header()); !r) return r;
  // Before reading the rows: a store already there is refused at once, not after the passes.
  if (auto r = outputs_.open(format_, result_); !r) return r;
  if (stats() && !split()) survey_.stats = new_stats();
  survey_.malformed.max_reported = o_.max_reported;
  ++result_.passes;
  return p->each([this](const nn::csv_line& line) { return survey_row(line); }, &survey_.malformed);
}

expected<void> importer::survey_row(const nn::csv_line& line) {
  auto out = to_record(line.fields, codec_, record_, o_.file, line.number);
  if (!out) return out.err();
  if (!out->kept) {
    ++survey_.skipped_missing;
    return {};
  }
  ++survey_.kept;
  survey_.filled += out->filled;
  if (auto a = labels_->add(out->label, line.number); !a) return a;
  if (split())
    survey_.hashes.push_back(splitmix64(line.number ^ o_.split_seed));
  else if (stats())
    survey_.stats.add(record_.dense);
  return {};
}

expected<void> importer::check_rows() {
  const auto& m = survey_.malformed;
  result_.malformed = m.count;
  result_.examples = m.examples;
  result_.skipped_missing = survey_.skipped_missing;
  result_.filled_missing = survey_.filled;
  if (m.count > 0 && !o_.skip_malformed) {
    std::string quoted = joined(m.examples, "; ");
    return bad(o_.file + ": " + std::to_string(m.count) + " malformed line" + (m.count == 1 ? "" : "s") +
               " (" + quoted + (m.count > m.examples.size() ? "; ..." : "") +
               "); nothing imported (--skip-malformed drops them)");
  }
  if (survey_.kept == 0) return bad(o_.file + ": no rows to import");
  return {};
}

expected<void> importer::choose_split() {
  if (!split()) return {};
  auto& h = survey_.hashes;
  const auto k = static_cast<std::size_t>(std::llround(o_.test_fraction * static_cast<double>(h.size())));
  if (k == 0 || k == h.size())
    return bad(o_.file + ": --test-fraction " + std::to_string(o_.test_fraction) + " of " +
               std::to_string(h.size()) + " rows leaves " + (k == 0 ? "the test" : "the training") +
               " store empty: give a " + (k == 0 ? "larger" : "smaller") + " fraction");
  std::nth_element(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(k - 1), h.end());
  threshold_ = h[k - 1];
  h = {};
  return {};
}

expected<csv_pass> importer::reopen() {
  auto p = csv_pass::open(o_.file, o_.delimiter);
  if (!p) return p.err();
  if (p->header() != cols_.names)
    return make_unexpected(core_errc::io_error, o_.file + ": changed while it was imported (its header)");
  ++result_.passes;
  return p;
}

expected<void> importer::stats_pass() {
  auto p = reopen();
  if (!p) return p.err();
  survey_.stats = new_stats();
  codec_.parse_dense = true;
  return p->each(
      [this](const nn::csv_line& line) -> expected<void> {
        auto out = to_record(line.fields, codec_, record_, o_.file, line.number);
        if (!out) return out.err();
        if (out->kept && !to_test(line.number)) survey_.stats.add(record_.dense);
        return {};
      },
      nullptr);
}

expected<void> importer::finish_format() {
  auto classes = labels_->decide();
  if (!classes) return classes.err();
  result_.num_classes = classes->num_classes;
  result_.class_names = classes->names;
  result_.notes = classes->notes;
  format_.class_names = std::move(classes->names);
  if (o_.standardize) format_.standardize = survey_.stats.scales(result_.dense_columns, scaled_);
  if (auto r = take_fills(); !r) return r;
  for (const auto& s : format_.standardize)
    if (s.std == 0) result_.constant_columns.push_back(s.column);
  result_.standardized = format_.standardize;
  auto codec = make_codec(format_, cols_.names, true, o_.file);
  if (!codec) return codec.err();
  codec_ = std::move(*codec);
  return {};
}

expected<void> importer::take_fills() {
  if (o_.missing != missing_policy::mean) return {};
  for (std::size_t k = 0; k < format_.fill.size(); ++k) {
    if (survey_.stats.present(k) == 0)
      return bad(o_.file + ": column '" + result_.dense_columns[k] + "': no value in the " +
                 (split() ? "training " : "") + "rows to take the mean of (--missing mean)");
    format_.fill[k] = survey_.stats.mean(k);
  }
  result_.fill = format_.fill;
  return {};
}

// Dense columns whose values reach far past the others' scale: trained as they are, one swamps the
// rest and the loss can run away (1e6 in one column: a job "ok" at a test loss of 1.6e10, no
// warning; plain PyTorch does as badly). --standardize is the cure.
void importer::note_large_columns(const std::vector<float>& largest) {
  constexpr float large = 1e4f;
  std::string named;
  std::size_t n = 0;
  for (std::size_t k = 0; k < largest.size(); ++k) {
    if (largest[k] <= large || std::find(scaled_.begin(), scaled_.end(), k) != scaled_.end()) continue;
    if (n++ < 5) {
      char v[32];
      std::snprintf(v, sizeof v, "%.3g", static_cast<double>(largest[k]));
      named += (named.empty() ? "" : ", ") + result_.dense_columns[k] + " (up to " + v + ")";
    }
  }
  if (n == 0) return;
  result_.notes.push_back(o_.file + ": " + std::to_string(n) +
                          " dense column(s) of values far past 1e4: " + named + (n > 5 ? ", ..." : "") +
                          "; trained as they are they swamp the other columns and training can diverge: "
                          "--standardize scales them (predict and serve apply the same scaling)");
}

expected<void> importer::write_pass() {
  auto p = reopen();
  if (!p) return p.err();
  std::uint64_t written = 0;
  std::vector<float> largest(cols_.dense.size());  // each dense column's largest magnitude, as stored
  auto r = p->each(
      [&](const nn::csv_line& line) -> expected<void> {
        auto out = to_record(line.fields, codec_, record_, o_.file, line.number);
        if (!out) return out.err();
        if (!out->kept) return {};
        ++written;
        for (std::size_t k = 0; k < largest.size(); ++k)
          largest[k] = std::max(largest[k], std::fabs(record_.dense[k]));
        return outputs_.append(to_test(line.number), record_);
      },
      nullptr);
  if (!r) return r;
  note_large_columns(largest);
  if (written != survey_.kept)
    return make_unexpected(core_errc::io_error, o_.file + ": changed while it was imported (" +
                                                    std::to_string(survey_.kept) + " rows, then " +
                                                    std::to_string(written) + ")");
  return {};
}

}  // namespace

expected<csv_import_result> import_csv(const csv_import_options& o) {
  if (o.test_fraction < 0 || o.test_fraction >= 1)
    return bad("test fraction " + std::to_string(o.test_fraction) + ": expected 0 <= F < 1");
  if (o.buckets_per_field < 2) return bad("buckets per field must be >= 2");
  std::error_code ec;
  if (fs::exists(o.file, ec) && !fs::is_regular_file(o.file, ec))
    return bad(o.file + ": not a regular file: the import reads it more than once (save it to a file first)");
  return importer(o).run();
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

std::optional<missing_policy> parse_missing_policy(const std::string& text) {
  if (text == "error") return missing_policy::error;
  if (text == "zero") return missing_policy::zero;
  if (text == "mean") return missing_policy::mean;
  if (text == "skip-row") return missing_policy::skip_row;
  return std::nullopt;
}

}  // namespace troupe::job
