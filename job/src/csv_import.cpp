#include "troupe/job/csv_import.hpp"

#include <algorithm>
#include <filesystem>

#include "csv_columns.hpp"
#include "csv_row.hpp"
#include "troupe/core/splitmix.hpp"
#include "troupe/nn/data/csv_reader.hpp"

namespace troupe::job {

namespace {

namespace fs = std::filesystem;

unexpected bad(const std::string& why) {
  return make_unexpected(core_errc::invalid_argument, why);
}

// A store this import writes. Discarding it removes only what the import made: the LMDB files of
// a writer it created, and the directory when it did not exist before (and is empty again).
struct output {
  explicit output(std::string d) : dir(std::move(d)) {}
  std::string dir;
  bool made_dir = false;
  std::optional<storage::record_writer> writer;

  expected<void> open(const storage::record_schema& s, const std::string& source) {
    std::error_code ec;
    made_dir = !fs::exists(dir, ec);
    auto w = storage::record_writer::create(dir, s, source);
    if (!w) return w.err();
    writer.emplace(std::move(*w));
    return {};
  }
  void discard() {
    std::error_code ec;
    if (writer) {
      writer.reset();
      fs::remove(fs::path(dir) / "data.mdb", ec);
      fs::remove(fs::path(dir) / "lock.mdb", ec);
    }
    if (made_dir) fs::remove(dir, ec);  // fails, harmlessly, when something else is in it
  }
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::vector<std::string> names_of(const csv_columns& c, const std::vector<std::size_t>& cols) {
  std::vector<std::string> out;
  for (auto i : cols) out.push_back(c.names[i]);
  return out;
}

class importer {
 public:
  explicit importer(const csv_import_options& o) : o_(o) {}

  expected<csv_import_result> run() {
    auto r = import();
    if (!r) {
      for (auto it = outputs_.rbegin(); it != outputs_.rend(); ++it) it->discard();
      if (made_out_) fs::remove(o_.out, ec_);
      return r.err();
    }
    return std::move(result_);
  }

 private:
  expected<void> import();
  expected<void> read_header(nn::csv_reader& in);
  expected<void> open_outputs();
  expected<void> add(const nn::csv_line& line);
  expected<void> finish_outputs();
  bool to_test(std::size_t line) const {
    if (o_.test_fraction <= 0) return false;
    const double u = static_cast<double>(splitmix64(line ^ o_.split_seed) >> 11) * 0x1.0p-53;
    return u < o_.test_fraction;
  }

  const csv_import_options& o_;
  csv_columns cols_;
  std::vector<output> outputs_;  // train, then test when split
  bool made_out_ = false;
  std::error_code ec_;
  storage::record record_;
  std::uint32_t max_label_ = 1;
  csv_import_result result_;
};

expected<void> importer::import() {
  auto in = nn::csv_reader::open(o_.file, o_.delimiter);
  if (!in) return in.err();
  if (auto h = read_header(*in); !h) return h;
  if (auto w = open_outputs(); !w) return w;
  nn::csv_line line;
  while (in->next(line))
    if (auto a = add(line); !a) return a;
  // A cut-short gzip file is that, whatever its last (partial) line looked like.
  if (auto f = in->finish(); !f) return f;
  if (result_.malformed > 0 && !o_.skip_malformed) {
    std::string quoted;
    for (const auto& e : result_.examples) quoted += (quoted.empty() ? "" : "; ") + e;
    return bad(o_.file + ": " + std::to_string(result_.malformed) + " malformed line" +
               (result_.malformed == 1 ? "" : "s") + " (" + quoted +
               (result_.malformed > result_.examples.size() ? "; ..." : "") +
               "); nothing imported (--skip-malformed drops them)");
  }
  return finish_outputs();
}

expected<void> importer::read_header(nn::csv_reader& in) {
  nn::csv_line header;
  if (!in.next(header)) {
    if (auto f = in.finish(); !f) return f;
    return bad(o_.file + ": empty: a header row naming the columns is required");
  }
  if (!header.malformed.empty())
    return bad(o_.file + ":" + std::to_string(header.number) + ": header: " + header.malformed);
  auto c = plan_columns(header.fields, o_.label, o_.dense, o_.sparse, o_.file);
  if (!c) return c.err();
  cols_ = std::move(*c);
  result_.dense_columns = names_of(cols_, cols_.dense);
  result_.sparse_columns = names_of(cols_, cols_.sparse);
  result_.ignored_columns = names_of(cols_, cols_.ignored);
  return {};
}

expected<void> importer::open_outputs() {
  storage::record_schema s;
  s.dense_dim = static_cast<std::uint32_t>(cols_.dense.size());
  s.sparse_fields = static_cast<std::uint32_t>(cols_.sparse.size());
  s.num_classes = 2;
  s.buckets_per_field = cols_.sparse.empty() ? 0 : o_.buckets_per_field;
  const std::string source = "csv:" + o_.file + " label=" + o_.label +
                             " dense=" + joined(result_.dense_columns) +
                             " sparse=" + joined(result_.sparse_columns);
  const bool split = o_.test_fraction > 0;
  made_out_ = split && !fs::exists(o_.out, ec_);
  outputs_.emplace_back(split ? (fs::path(o_.out) / "train").string() : o_.out);
  if (split) outputs_.emplace_back((fs::path(o_.out) / "test").string());
  for (auto& out : outputs_)
    if (auto r = out.open(s, source + (split ? (&out == &outputs_[0] ? " (train)" : " (test)") : "")); !r)
      return r;
  result_.train_dir = outputs_[0].dir;
  if (split) result_.test_dir = outputs_[1].dir;
  return {};
}

expected<void> importer::add(const nn::csv_line& line) {
  std::string why = line.malformed;
  if (why.empty() && line.fields.size() != cols_.names.size())
    why =
        std::to_string(line.fields.size()) + " fields, the header has " + std::to_string(cols_.names.size());
  if (!why.empty()) {
    if (result_.examples.size() < o_.max_reported)
      result_.examples.push_back("line " + std::to_string(line.number) + ": " + why);
    ++result_.malformed;
    return {};
  }
  auto kept = to_record(line, cols_, {o_.file, o_.missing, o_.buckets_per_field}, record_);
  if (!kept) return kept.err();
  if (!*kept) {
    ++result_.skipped_missing;
    return {};
  }
  max_label_ = std::max(max_label_, static_cast<std::uint32_t>(record_.label));
  auto& out = outputs_[to_test(line.number) ? 1 : 0];
  return out.writer->append(record_);
}

expected<void> importer::finish_outputs() {
  if (outputs_[0].writer->count() == 0)
    return bad(o_.file + ": no rows to import" + (outputs_.size() > 1 ? " into the training store" : ""));
  if (outputs_.size() > 1 && outputs_[1].writer->count() == 0)
    return bad(o_.file + ": --test-fraction " + std::to_string(o_.test_fraction) +
               " put none of the rows into the test store: give a larger fraction");
  result_.num_classes = max_label_ + 1;
  for (auto& out : outputs_) {
    out.writer->set_num_classes(result_.num_classes);
    auto m = out.writer->finish();
    if (!m) return m.err();
    (&out == &outputs_[0] ? result_.train : result_.test) = *m;
  }
  return {};
}

}  // namespace

expected<csv_import_result> import_csv(const csv_import_options& o) {
  if (o.test_fraction < 0 || o.test_fraction >= 1)
    return bad("test fraction " + std::to_string(o.test_fraction) + ": expected 0 <= F < 1");
  if (o.buckets_per_field < 2) return bad("buckets per field must be >= 2");
  return importer(o).run();
}

std::optional<missing_policy> parse_missing_policy(const std::string& text) {
  if (text == "error") return missing_policy::error;
  if (text == "zero") return missing_policy::zero;
  if (text == "skip-row") return missing_policy::skip_row;
  return std::nullopt;
}

}  // namespace troupe::job
