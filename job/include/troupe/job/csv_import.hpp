// `troupe data import csv`: a CSV file of the user's (plain or gzipped) into record stores that
// jobs read like the built-in ones ([data] source = "store"; docs/data.md, "Your own CSV data").
//
// The first line is the header; columns are named there. The label column holds class ids
// (0/1: binary, 0..K-1: K classes) or any text (each distinct text a class, numbered in sorted
// order, the names kept); dense columns numbers; sparse columns any text, hashed into field-scoped
// ids as the Criteo reader does (nn::category_id; an empty field is the field's "missing" id).
//
// The file is read two or three times: a first pass learns the classes, the rows kept (for an
// exact split), the missing values and, without a split, the standardization; with a split and
// standardization a second pass takes the mean and deviation of the training rows; the last pass
// parses every value and writes. The manifests keep what reading a raw row takes (storage::row_format;
// job::row_encoder applies it). An import that fails leaves no store. Memory: 8 bytes per row with a split.
//
// Errors: core_errc::invalid_argument for the input or the options (no header, unknown or duplicate
// columns, a bad label or number naming file, line and column, a missing value under
// missing_policy::error, malformed lines without skip_malformed, no rows, more than 65536 classes);
// core_errc::io_error and storage errors when a file cannot be read (or changed between passes) or
// a store written. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

// What a missing label or dense value means: an empty field, or NaN, NA, N/A, null in any case.
enum class missing_policy {
  error,     // the import fails, naming line and column
  zero,      // a dense value reads as 0 (an empty label is still an error)
  mean,      // a dense value reads as its column's mean over the training rows' present values
  skip_row,  // the row is dropped and counted
};

struct csv_import_options {
  std::string file;
  // test_fraction 0: one store in `out`; else `out`/train and `out`/test.
  std::string out;
  std::string label;
  // Column names. dense unset: every column that is neither the label nor sparse.
  std::optional<std::vector<std::string>> dense;
  std::vector<std::string> sparse;
  char delimiter = ',';
  // round(test_fraction x rows) rows go to the test store: those whose splitmix64(line number ^
  // split_seed) are the lowest. The same file and seed split the same way every time.
  double test_fraction = 0;
  std::uint64_t split_seed = 0x5eed;
  // Dense columns made (x - mean) / std with the training rows' mean and std. nullopt: none; empty:
  // every dense column.
  std::optional<std::vector<std::string>> standardize;
  missing_policy missing = missing_policy::error;
  bool skip_malformed = false;
  std::uint64_t buckets_per_field = 1u << 20;
  std::size_t max_reported = 5;  // malformed lines quoted in messages
};

struct csv_import_result {
  std::string train_dir, test_dir;  // test_dir empty without a split
  storage::manifest train, test;
  std::vector<std::string> dense_columns, sparse_columns, ignored_columns;
  std::uint32_t num_classes = 2;
  std::vector<std::string> class_names;  // labels that were text: class i's; empty: class ids
  // What the user should look at (not errors): classes without rows, class ids nearly all distinct,
  // dense columns of a scale that swamps the others (without --standardize).
  std::vector<std::string> notes;
  std::vector<storage::column_scale> standardized;
  std::vector<std::string> constant_columns;  // standardized, std 0: centred only
  std::uint64_t filled_missing = 0;           // dense values filled (missing_policy::zero or mean)
  std::vector<double> fill;                   // missing_policy::mean: each dense column's fill
  unsigned passes = 0;                        // times the file was read
  std::uint64_t malformed = 0;                // lines dropped (skip_malformed)
  std::vector<std::string> examples;          // "line N: why" for the first max_reported of them
  std::uint64_t skipped_missing = 0;          // rows dropped for a missing value (missing_policy::skip_row)
};

expected<csv_import_result> import_csv(const csv_import_options& o);

// `troupe data import csv --like MODEL_DIR`: the file's rows encoded as `like` says a model's
// training rows were (model.json's columns: the same label, dense and sparse columns, class ids by
// the same names, hash, standardization and missing values; nothing learnt from this file), so that
// a model warm-started from it ([model] init) or evaluated on the store reads them as it was
// trained to (a day's import standardized anew and numbered its classes anew). `num_classes`: the
// model's. Of `o`, the file, out, delimiter, test split and skip_malformed are used. Errors name the
// line: a label that is none of the model's classes, a missing label, a value the encoding refuses.
expected<csv_import_result> import_csv_like(const csv_import_options& o, const storage::row_format& like,
                                            std::uint32_t num_classes);

// "zero" | "mean" | "skip-row" | "error"; nullopt for anything else.
std::optional<missing_policy> parse_missing_policy(const std::string& text);

// `text` as one CSV field (RFC 4180, as the import reads fields): as it is, or in double quotes with
// its quotes doubled where it holds a comma, a quote, CR or LF.
std::string csv_field(std::string_view text);

}  // namespace troupe::job
