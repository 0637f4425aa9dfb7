#include "data_csv.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "troupe/core/clock.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/model/model_dir.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::cli {

namespace {

struct csv_flags {
  job::csv_import_options o;
  std::vector<std::string> dense, sparse, standardize;
  std::string delimiter = ",", missing = "error", like;
  CLI::Option* dense_option = nullptr;
  CLI::Option* standardize_option = nullptr;
  // The flags --like takes from the model (given with it: refused), and --delimiter (its default).
  std::vector<CLI::Option*> encoding_options;
  CLI::Option* delimiter_option = nullptr;
};

// A name quoted where it holds a comma or a quote ("price, usd" read as two names in the list).
std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + job::csv_field(n);
  return out.empty() ? "none" : out;
}

// `--dense ',,'` named no column (the import made rows of no feature, refused only by the job).
unexpected empty_name(const std::string& value, const char* flag) {
  return make_unexpected(
      core_errc::invalid_argument,
      std::string(flag) + " '" + value + "': an empty column name (two commas, or one at an end)");
}

// The column names of --dense, --sparse and --standardize values: comma-separated, a name in double
// quotes may hold commas ("price, usd" as --dense '"price, usd",rooms'; "" within quotes is a quote).
expected<std::vector<std::string>> column_names(const std::vector<std::string>& given, const char* flag) {
  std::vector<std::string> out;
  for (const auto& value : given) {
    if (value.empty()) continue;  // `--standardize` given without a list: every dense column
    std::string name;
    bool quoted = false, any = false;
    for (std::size_t i = 0; i < value.size(); ++i) {
      const char ch = value[i];
      if (quoted && ch == '"' && i + 1 < value.size() && value[i + 1] == '"') {
        name += value[++i];
      } else if (ch == '"') {
        quoted = !quoted;
        any = true;
      } else if (ch == ',' && !quoted) {
        if (!any && name.empty()) return empty_name(value, flag);
        out.push_back(std::move(name));
        name.clear();
        any = false;
      } else {
        name += ch;
      }
    }
    if (quoted)
      return make_unexpected(core_errc::invalid_argument,
                             std::string(flag) + " '" + value +
                                 "': a quote is not closed (a name with a comma is given as \"a, b\")");
    if (!any && name.empty()) return empty_name(value, flag);
    out.push_back(std::move(name));
  }
  return out;
}

void print_classes(const job::csv_import_result& r, const job::csv_import_options& o) {
  std::printf("label %s: %u classes%s", o.label.c_str(), r.num_classes,
              r.num_classes == 2 ? " (binary)" : "");
  if (!r.class_names.empty()) {
    std::printf(", named in sorted order:");
    for (std::size_t i = 0; i < r.class_names.size() && i < 20; ++i)
      std::printf("%s %zu=%s", i ? "," : "", i, r.class_names[i].c_str());
    if (r.class_names.size() > 20) std::printf(", ...");
  }
  std::printf("\n");
  for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
}

void print_standardized(const job::csv_import_result& r) {
  if (r.standardized.empty()) return;
  const std::size_t n = r.standardized.size(), shown = std::min<std::size_t>(n, 8);
  std::printf("standardized (%zu), mean and std of the training rows:", n);
  for (std::size_t i = 0; i < shown; ++i)
    std::printf("%s %s %.6g/%.6g", i ? "," : "", r.standardized[i].column.c_str(), r.standardized[i].mean,
                r.standardized[i].std);
  std::printf("%s\n", n > shown ? ", ... (the manifest keeps them all)" : "");
  if (!r.constant_columns.empty())
    std::printf("constant in the training rows (std 0), centred only: %s\n",
                listed(r.constant_columns).c_str());
}

void print_fills(const job::csv_import_result& r) {
  // Each dense column's fill, whether or not it had a missing value (it listed "Age 48.66" after
  // "filled 101 missing values" where Age had none): the values a missing cell would take.
  std::printf(
      "filled %llu missing values with their column's mean of the training rows (--missing mean); a "
      "missing cell of each column takes:",
      static_cast<unsigned long long>(r.filled_missing));
  const std::size_t n = r.fill.size(), shown = std::min<std::size_t>(n, 8);
  for (std::size_t i = 0; i < shown; ++i)
    std::printf("%s %s %.6g", i ? "," : "", r.dense_columns[i].c_str(), r.fill[i]);
  std::printf("%s\n", n > shown ? ", ... (the manifest keeps them all)" : "");
}

// "1 record", "2 records".
const char* plural(std::uint64_t n, const char* one, const char* many) {
  return n == 1 ? one : many;
}

void print_summary(const job::csv_import_result& r, const job::csv_import_options& o, double secs) {
  std::printf("%s: %llu %s", r.train_dir.c_str(), static_cast<unsigned long long>(r.train.record_count),
              plural(r.train.record_count, "record", "records"));
  if (!r.test_dir.empty())
    std::printf(", %s: %llu %s (test fraction %g, seed %llu)", r.test_dir.c_str(),
                static_cast<unsigned long long>(r.test.record_count),
                plural(r.test.record_count, "record", "records"), o.test_fraction,
                static_cast<unsigned long long>(o.split_seed));
  std::printf(" from %s in %.2f s (%u passes)\n", o.file.c_str(), secs, r.passes);
  print_classes(r, o);
  std::printf("dense (%zu): %s\n", r.dense_columns.size(), listed(r.dense_columns).c_str());
  if (r.sparse_columns.empty())
    std::printf("sparse: none\n");
  else
    std::printf("sparse (%zu, %llu ids each): %s\n", r.sparse_columns.size(),
                static_cast<unsigned long long>(o.buckets_per_field), listed(r.sparse_columns).c_str());
  if (!r.ignored_columns.empty()) std::printf("ignored: %s\n", listed(r.ignored_columns).c_str());
  print_standardized(r);
  if (o.missing == job::missing_policy::zero)
    std::printf("filled %llu missing values with 0 (--missing zero)\n",
                static_cast<unsigned long long>(r.filled_missing));
  if (o.missing == job::missing_policy::mean) print_fills(r);
  if (r.skipped_missing > 0)
    std::printf("skipped %llu rows with a missing value (--missing skip-row)\n",
                static_cast<unsigned long long>(r.skipped_missing));
  if (r.malformed > 0) {
    std::printf("skipped %llu malformed %s (--skip-malformed):", static_cast<unsigned long long>(r.malformed),
                plural(r.malformed, "line", "lines"));
    for (std::size_t i = 0; i < r.examples.size(); ++i)
      std::printf("%s %s", i ? ";" : "", r.examples[i].c_str());
    std::printf("%s\n", r.malformed > r.examples.size() ? "; ..." : "");
  }
}

// The encoding --like names and its class count: a model directory's training rows (model.json's
// columns), or a record store imported from CSV (a job's data.train: its test rows imported apart).
expected<std::pair<storage::row_format, std::uint32_t>> like_format(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/model.json", ec) && std::filesystem::exists(dir + "/data.mdb", ec)) {
    auto store = storage::record_store::open_read_only(dir);
    if (!store) return store.err();
    if (!store->info().columns)
      return make_unexpected(core_errc::invalid_argument,
                             dir + ": a record store not imported from CSV: it says no encoding of rows");
    return std::pair{*store->info().columns, store->info().schema.num_classes};
  }
  auto m = model::read_model_dir(dir);
  if (!m) return m.err();
  auto format = model::row_format_of(*m);
  if (!format) return format.err();
  return std::pair{std::move(*format), static_cast<std::uint32_t>(m->classes)};
}

// --like MODEL_DIR or STORE: the rows encoded as the model's training rows (or the store's rows)
// were (job::import_csv_like).
int import_like(csv_flags& f) {
  for (const auto* opt : f.encoding_options)
    if (opt->count() > 0)
      return usage_error(opt->get_name() + " with --like " + f.like +
                         ": --like takes the model's columns and encoding (model.json's columns)");
  auto like = like_format(f.like);
  if (!like) return usage_error(std::move(like).err().wrap("--like"));
  auto& [format, classes] = *like;
  if (f.delimiter_option->count() > 0) format.delimiter = f.o.delimiter;
  f.o.delimiter = format.delimiter;
  f.o.label = format.label;
  f.o.buckets_per_field = format.buckets_per_field;
  f.o.missing = job::parse_missing_policy(format.missing).value_or(job::missing_policy::error);
  auto start = clock::system().now();  // real time, for the summary
  auto r = job::import_csv_like(f.o, format, classes);
  if (!r) return r.err() == core_errc::invalid_argument ? usage_error(r.err()) : run_error(r.err());
  print_summary(*r, f.o, std::chrono::duration<double>(clock::system().now() - start).count());
  std::printf(
      "encoded as the training rows of %s (--like): its classes, standardization and missing values\n",
      f.like.c_str());
  return 0;
}

int import_csv(csv_flags& f) {
  if (!parse_delimiter(f.delimiter, f.o.delimiter))
    return usage_error("--delimiter '" + f.delimiter + "': expected one character (or tab), not a quote");
  auto missing = job::parse_missing_policy(f.missing);
  if (!missing) return usage_error("--missing '" + f.missing + "': expected zero, mean, skip-row or error");
  f.o.missing = *missing;
  if (!f.like.empty()) return import_like(f);
  if (f.o.label.empty()) return usage_error("--label is required (or --like MODEL_DIR)");
  // Split here, not by CLI11 (its delimiter splits a quoted name, and counts "a,b" as two values
  // against --standardize's expected(0, 1)).
  auto dense = column_names(f.dense, "--dense");
  auto sparse = column_names(f.sparse, "--sparse");
  auto standardize = column_names(f.standardize, "--standardize");
  for (const auto* names : {&dense, &sparse, &standardize})
    if (!*names) return usage_error(names->err());
  if (f.dense_option->count() > 0) f.o.dense = std::move(*dense);
  f.o.sparse = std::move(*sparse);
  if (f.standardize_option->count() > 0) f.o.standardize = std::move(*standardize);
  auto start = clock::system().now();  // real time, for the summary
  auto r = job::import_csv(f.o);
  if (!r) return r.err() == core_errc::invalid_argument ? usage_error(r.err()) : run_error(r.err());
  print_summary(*r, f.o, std::chrono::duration<double>(clock::system().now() - start).count());
  return 0;
}

}  // namespace

// "," "\t" "tab" ";" ...: one character that is not a quote or a line break.
bool parse_delimiter(const std::string& text, char& out) {
  if (text == "tab" || text == "\\t") {
    out = '\t';
    return true;
  }
  if (text.size() != 1 || text[0] == '"' || text[0] == '\n' || text[0] == '\r') return false;
  out = text[0];
  return true;
}

runner add_import_csv(CLI::App& import_cmd, std::shared_ptr<int> mode, int id) {
  auto f = std::make_shared<csv_flags>();
  auto* c = import_cmd.add_subcommand("csv", "A CSV file with a header row (.gz accepted): docs/data.md");
  c->add_option("file", f->o.file, "CSV file")->required();
  c->add_option("--out", f->o.out, "store directory (with --test-fraction: DIR/train and DIR/test)")
      ->required();
  auto* label =
      c->add_option("--label", f->o.label, "the label column (class ids 0..K-1, 0/1 binary; or names)");
  f->dense_option = c->add_option(
      "--dense", f->dense, "dense columns, comma-separated (default: the rest; \"a, b\" quoted for a comma)");
  auto* sparse =
      c->add_option("--sparse", f->sparse, "categorical columns, comma-separated (hashed into ids)");
  f->delimiter_option = c->add_option("--delimiter", f->delimiter, "field separator: one character, or tab");
  c->add_option(
      "--like", f->like,
      "a model directory (jobs/<id>/model) or a record store imported from CSV: encode the rows as its "
      "training rows were (its columns, classes, standardization, missing values), to train it further, "
      "evaluate it, or as a job's test rows");
  c->add_option("--test-fraction", f->o.test_fraction, "rows held out into DIR/test (0: one store in DIR)")
      ->check(CLI::Range(0.0, 0.99));
  f->standardize_option =
      c->add_option("--standardize", f->standardize,
                    "dense columns made (x-mean)/std with the training rows' statistics (no list: every one)")
          ->expected(0, 1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--seed", f->o.split_seed, "the test split's seed (the same file and seed: the same split)");
  auto* missing = c->add_option("--missing", f->missing,
                                "an empty or NaN/NA label or dense field: error, zero, mean or skip-row")
                      ->check(CLI::IsMember({"error", "zero", "mean", "skip-row"}));
  c->add_flag("--skip-malformed", f->o.skip_malformed, "drop malformed lines (counted) instead of failing");
  auto* buckets = c->add_option("--buckets", f->o.buckets_per_field, "ids per sparse column")
                      ->check(CLI::Range(2ull, 1ull << 40));
  f->encoding_options = {label, f->dense_option, sparse, f->standardize_option, missing, buckets};
  c->callback([mode, id] { *mode = id; });
  return [f] { return import_csv(*f); };
}

}  // namespace troupe::cli
