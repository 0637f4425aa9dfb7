// `troupe data import csv --like MODEL_DIR` (csv_import.hpp): the rows through job::row_encoder with
// the model's own format, into stores whose manifests carry that format.
#include <algorithm>
#include <cmath>

#include "csv_output.hpp"
#include "csv_pass.hpp"
#include "troupe/core/splitmix.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/job/row_encoder.hpp"

namespace troupe::job {

namespace {

class like_importer {
 public:
  like_importer(const csv_import_options& o, const storage::row_format& like, std::uint32_t classes)
      : o_(o), like_(like), classes_(classes), outputs_(o) {}

  expected<csv_import_result> run() {
    return imported_or_discarded(outputs_, result_, [this] { return import(); });
  }

 private:
  expected<void> import() {
    auto enc = row_encoder::create(like_, "--like", classes_);
    if (!enc) return enc.err();
    enc->skip_dropped_rows();  // the model's rows had none: dropped as its import dropped them
    enc_.emplace(std::move(*enc));
    if (auto p = pass(false); !p) return p;
    if (auto s = choose_split(); !s) return s;
    if (auto o = outputs_.open(like_, result_); !o) return o;
    if (auto p = pass(true); !p) return p;
    auto m = outputs_.finish(classes_, like_);
    if (!m) return m.err();
    result_.train = m->first;
    result_.test = m->second;
    result_.dense_columns = like_.dense;
    result_.sparse_columns = like_.sparse;
    result_.num_classes = classes_;
    result_.class_names = like_.class_names;
    result_.standardized = like_.standardize;
    result_.fill = like_.fill;
    return {};
  }

  // One read of the file: the rows' split hashes (first), or the rows written (then).
  expected<void> pass(bool write) {
    auto p = csv_pass::open(o_.file, o_.delimiter);
    if (!p) return p.err();
    ++result_.passes;
    if (auto h = enc_->use_header(p->header()); !h) return std::move(h).err().wrap(o_.file);
    if (std::find(p->header().begin(), p->header().end(), like_.label) == p->header().end())
      return bad(o_.file + ": no label column '" + like_.label + "' in the header (the model's label)");
    malformed_lines malformed;
    std::uint64_t kept = 0;
    auto r = p->each([&](const nn::csv_line& line) { return row(line, write, kept); }, &malformed);
    if (!r) return r;
    if (malformed.count > 0 && !o_.skip_malformed)
      return bad(o_.file + ": " + malformed.examples.front() + " (--skip-malformed drops such lines)");
    if (write && kept != kept_)
      return make_unexpected(core_errc::io_error, o_.file + ": changed while it was imported");
    if (!write) {
      kept_ = kept;
      result_.malformed = malformed.count;
      result_.examples = malformed.examples;
      if (kept == 0) return bad(o_.file + ": no row to import");
    }
    return {};
  }

  // One row of a pass: encoded, then hashed for the split (first) or written (then).
  expected<void> row(const nn::csv_line& line, bool write, std::uint64_t& kept) {
    const std::string at = o_.file + ":" + std::to_string(line.number);
    auto e = enc_->encode_fields(line.fields, record_, at);
    if (!e) return e.err();
    if (e->dropped) {
      if (!write) ++result_.skipped_missing;
      return {};
    }
    if (!e->labelled) return bad(at + ": column '" + like_.label + "': no label");
    ++kept;
    const bool split = o_.test_fraction > 0;
    if (!write) {
      result_.filled_missing += e->filled;
      if (split) hashes_.push_back(splitmix64(line.number ^ o_.split_seed));
      return {};
    }
    return outputs_.append(split && splitmix64(line.number ^ o_.split_seed) <= threshold_, record_);
  }

  expected<void> choose_split() {
    if (o_.test_fraction <= 0) return {};
    const auto k =
        static_cast<std::size_t>(std::llround(o_.test_fraction * static_cast<double>(hashes_.size())));
    if (k == 0 || k == hashes_.size())
      return bad(o_.file + ": --test-fraction " + std::to_string(o_.test_fraction) + " of " +
                 std::to_string(hashes_.size()) + " rows leaves a store empty");
    std::nth_element(hashes_.begin(), hashes_.begin() + static_cast<std::ptrdiff_t>(k - 1), hashes_.end());
    threshold_ = hashes_[k - 1];
    hashes_ = {};
    return {};
  }

  static unexpected bad(const std::string& why) { return make_unexpected(core_errc::invalid_argument, why); }

  const csv_import_options& o_;
  const storage::row_format& like_;
  std::uint32_t classes_;
  csv_outputs outputs_;
  std::optional<row_encoder> enc_;
  storage::record record_;
  std::vector<std::uint64_t> hashes_;
  std::uint64_t threshold_ = 0, kept_ = 0;
  csv_import_result result_;
};

}  // namespace

expected<csv_import_result> import_csv_like(const csv_import_options& o, const storage::row_format& like,
                                            std::uint32_t num_classes) {
  if (o.test_fraction < 0 || o.test_fraction >= 1)
    return make_unexpected(core_errc::invalid_argument,
                           "test fraction " + std::to_string(o.test_fraction) + ": expected 0 <= F < 1");
  return like_importer(o, like, num_classes).run();
}

}  // namespace troupe::job
