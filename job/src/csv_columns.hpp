// Which CSV column is the label, which are dense and sparse features: the header read against the
// names given to `troupe data import csv`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::job {

struct csv_columns {
  std::vector<std::string> names;  // the header
  std::size_t label = 0;
  std::vector<std::size_t> dense, sparse, ignored;  // indices into names, in the order given
};

// Errors (invalid_argument, naming `where`): a header that repeats a name or looks like data (every
// field a number: no header), a name given that the header lacks (listing the header's), a column
// given twice or as the label and a feature.
expected<csv_columns> plan_columns(const std::vector<std::string>& header, const std::string& label,
                                   const std::optional<std::vector<std::string>>& dense,
                                   const std::vector<std::string>& sparse, const std::string& where);

}  // namespace troupe::job
