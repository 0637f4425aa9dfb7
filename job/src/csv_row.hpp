// One CSV row (split, of the header's width) into one record: the label column's class id, the
// dense columns' numbers (standardized where asked), the sparse columns' ids. The import
// (csv_import.cpp) and job::row_encoder both read rows only through to_record, with a codec that
// make_codec built from a storage::row_format, so that a row reads the same in both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "csv_cells.hpp"
#include "csv_columns.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/storage/record.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::job {

struct dense_scale {
  bool on = false;
  double mean = 0, std = 1;  // std 0: centred only
};

struct row_codec {
  csv_columns cols;
  missing_policy missing = missing_policy::error;
  std::uint64_t buckets_per_field = 0;
  // Absent: the label is only checked for a value and handed back as text (an import's first pass,
  // before the classes are known).
  std::optional<label_codec> labels;
  std::vector<dense_scale> scales;  // one per dense column; empty: none standardized
  // missing_policy::mean: what a missing dense value reads as, one per dense column, before
  // standardizing. Empty under mean (an import's passes before the means are known): NaN.
  std::vector<double> fills;
  // An import's rows must have a label; rows to predict may lack one (no column, or no value).
  bool label_required = true;
  // What an import's first passes may skip: dense cells are then only checked for a missing
  // value (r.dense left unset), sparse ones not hashed. The pass that writes reads everything.
  bool parse_dense = true;
  bool hash_sparse = true;
  // Whose rows: an import's (errors name the --missing that accepts a missing value), or a trained
  // model's (row_encoder: its import's rule stands). Errors give a column's position in the header
  // unless the cells are named with no order (serve's /rows objects).
  bool import = true;
  bool positions = true;
};

// Checks `f` and places its columns in `header`. Errors (invalid_argument, naming `where`): a
// missing policy or hash this build does not know, a delimiter that is a quote or line break, no
// buckets for sparse columns, repeated class names, a standardized column that is not dense or a
// mean/std that is not finite (std < 0), missing "mean" without one finite fill value per dense
// column, a dense or sparse column the header lacks.
expected<row_codec> make_codec(const storage::row_format& f, const std::vector<std::string>& header,
                               bool label_required, const std::string& where);

struct row_outcome {
  bool kept = true;          // false: a missing value under skip-row, in column missing_column
  bool labelled = false;     // r.label holds the row's class id
  std::string_view label;    // the label cell, trimmed (a view into the fields)
  std::uint32_t filled = 0;  // dense cells filled (missing_policy::zero or mean)
  std::size_t missing_column = 0;
};

// Fills `r` (sized for the codec) from `fields` (the header's width). Errors (invalid_argument)
// name `file`:`line` (what of them there is), the column and the text: a label that is no class, a
// dense value that is not a finite number, a missing label (when required) or dense value under
// missing_policy::error (a missing label under zero too).
expected<row_outcome> to_record(const std::vector<std::string>& fields, const row_codec& c,
                                storage::record& r, const std::string& file, std::size_t line);

// "error" | "zero" | "mean" | "skip-row".
const char* missing_name(missing_policy p);

}  // namespace troupe::job
