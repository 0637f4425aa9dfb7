// The rows `troupe predict` and `troupe evaluate` run the model on (cmd_predict.cpp): a record store
// of the model's shape, or a CSV file encoded into one as the model's training data was imported,
// checked before any node starts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/model/model_dir.hpp"

namespace troupe::cli {

struct input_options {
  std::string data;       // a CSV file or a record store
  std::string delimiter;  // a CSV's; empty: the import's (model.json's columns.delimiter)
  bool skip_malformed = false;
};

// The number the output gives each row: its record number (a store), or its CSV line (the header
// is line 1; blank lines are skipped, so the lines of the rows after one jump: `jumps` holds the
// record where each jump lands and its line).
struct row_numbers {
  std::uint64_t first = 0;  // the number of record 0 when there are no jumps
  std::vector<std::pair<std::uint64_t, std::uint64_t>> jumps;
  bool lines = false;  // CSV lines, not records
  std::uint64_t of(std::uint64_t record) const {
    auto it = std::upper_bound(jumps.begin(), jumps.end(), record,
                               [](std::uint64_t r, const auto& j) { return r < j.first; });
    return it == jumps.begin() ? first + record : std::prev(it)->second + (record - std::prev(it)->first);
  }
};

struct input {
  std::string store;
  bool copy = false;  // `store` is the job's own encoding of a CSV (its <job dir>/input), not the user's
  row_numbers numbers;
  // Rows with a missing value that a model trained with --missing skip-row cannot score (its
  // training rows had none): skipped, as the import skipped them; the first one's line and column.
  std::uint64_t skipped = 0;
  std::string first_skipped;
  // Malformed lines (a field count other than the header's, bad quoting) dropped with
  // --skip-malformed: how many, and the first five ("line N: why").
  std::uint64_t malformed = 0;
  std::vector<std::string> malformed_examples;
};

// The input checked against the model before anything runs: a record store of the model's shape,
// or a CSV file encoded into one (in `job_dir`/input). Errors: invalid_argument for input refused
// (naming the file, line and column), io_error for a file that cannot be read (a truncated gzip).
expected<input> input_store(const input_options& o, const model::model_info& m, const std::string& job_dir,
                            bool evaluate);

}  // namespace troupe::cli
