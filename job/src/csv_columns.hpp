// Which CSV column is the label, which are dense and sparse features: the header read against the
// names given to `troupe data import csv`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::job {

struct csv_columns {
  std::vector<std::string> names;                   // the header
  std::optional<std::size_t> label;                 // absent: rows without a label (rows to predict)
  std::vector<std::size_t> dense, sparse, ignored;  // indices into names, in the order given
};

// Errors (invalid_argument, naming `where`): a header that repeats a name, is not UTF-8 text or
// looks like data (every field a number: no header), a name given that the header lacks (listing
// the header's), a column given twice or as the label and a feature.
expected<csv_columns> plan_columns(const std::vector<std::string>& header, const std::string& label,
                                   const std::optional<std::vector<std::string>>& dense,
                                   const std::vector<std::string>& sparse, const std::string& where);

// "a, b, c" (with sep ", ").
std::string joined(const std::vector<std::string>& names, const char* sep);

// The positions of `f`'s columns in `header` (the label's when the header has it). Errors
// (invalid_argument, naming `where`): a header that repeats a name, a dense or sparse column of `f`
// it lacks.
expected<csv_columns> bind_columns(const std::vector<std::string>& header, const storage::row_format& f,
                                   const std::string& where);

}  // namespace troupe::job
