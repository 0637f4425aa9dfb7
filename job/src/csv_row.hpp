// One CSV line (split, of the header's width) into one record: the label column's class id, the
// dense columns' numbers, the sparse columns' ids.
#pragma once

#include <cstdint>
#include <string>

#include "csv_columns.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/nn/data/csv_reader.hpp"
#include "troupe/storage/record.hpp"

namespace troupe::job {

inline constexpr std::uint32_t max_class_id = 65535;

struct row_rules {
  std::string file;  // for messages
  missing_policy missing = missing_policy::error;
  std::uint64_t buckets_per_field = 0;
};

// Fills `r` (sized for c) from `line`; false when the row is dropped for a missing value
// (missing_policy::skip_row). Errors (invalid_argument) name file:line, the column and the text: a
// label that is not an integer in [0, max_class_id], a dense value that is not a finite number, an
// empty label or dense value under missing_policy::error (an empty label under zero too).
expected<bool> to_record(const nn::csv_line& line, const csv_columns& c, const row_rules& rules,
                         storage::record& r);

}  // namespace troupe::job
