// One read of an import's CSV file from the top: its header, then its lines. The import reads its
// file two or three times (csv_import.hpp); each pass is one of these.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/nn/data/csv_reader.hpp"

namespace troupe::job {

// Lines that were not rows: a field count other than the header's, or bad quoting.
struct malformed_lines {
  std::uint64_t count = 0;
  std::vector<std::string> examples;  // "line N: why", the first max_reported of them
  std::size_t max_reported = 5;
};

class csv_pass {
 public:
  // Opens `file` and reads its header. Errors: io_error when it cannot be opened (or a gzip stream
  // ends inside the header); invalid_argument for an empty file or a malformed header.
  static expected<csv_pass> open(const std::string& file, char delimiter);

  const std::vector<std::string>& header() const { return header_.fields; }

  // Hands every row (a line of the header's width) to `fn`, stopping at its first error; other
  // lines are counted in `bad` when given, else skipped. Then the reader's end check (a cut-short
  // gzip file is an io_error, whatever its last line looked like).
  using row_fn = std::function<expected<void>(const nn::csv_line&)>;
  expected<void> each(const row_fn& fn, malformed_lines* bad);

 private:
  explicit csv_pass(nn::csv_reader in) : in_(std::move(in)) {}
  nn::csv_reader in_;
  nn::csv_line header_;
};

}  // namespace troupe::job
