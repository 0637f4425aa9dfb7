// Reading delimited text (CSV, TSV) record by record, plain or gzipped (detected by content), for
// importers that convert each record as it comes (`troupe data import csv`, job/csv_import.hpp).
//
// Quoting follows RFC 4180 without line breaks inside quotes: a field that starts with a double
// quote ends at the next lone double quote and may hold the delimiter; "" inside it is one quote.
// Anything else is a malformed line (a quote inside an unquoted field, text after a closing quote,
// a quote left open at the end of the line). Lines end with \n or \r\n; blank lines (empty, or only
// spaces and tabs that are not the delimiter) are skipped.
// Not thread-safe; one reader per file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"

namespace troupe::nn {

namespace detail {
class gz_file;
}

// Splits `line` into `fields` (cleared first), unquoting quoted fields. Returns "" or why the line
// is malformed (`fields` then holds what was read before the problem).
std::string split_delimited(std::string_view line, char delimiter, std::vector<std::string>& fields);

struct csv_line {
  std::size_t number = 0;           // 1-based line number in the (decompressed) file
  std::vector<std::string> fields;  // unquoted
  std::string malformed;            // "" or why the line could not be split
};

// Why `line` is no row of a file whose header has `width` fields: its quoting (csv_line::malformed),
// or another field count ("9 fields, the header has 8"). Empty: a row.
std::string row_problem(const csv_line& line, std::size_t width);

class csv_reader {
 public:
  // Errors (io_error) name the file when it cannot be opened.
  static expected<csv_reader> open(const std::string& path, char delimiter);
  csv_reader(csv_reader&&) noexcept;
  csv_reader& operator=(csv_reader&&) noexcept;
  ~csv_reader();

  // The next non-blank line, split; false at the end of the file. A UTF-8 byte order mark at the
  // start of the file is dropped.
  bool next(csv_line& out);
  // After next() returned false: an error (io_error naming the file and the last line) when the
  // file did not end cleanly (a gzip stream cut short or corrupt), else ok.
  expected<void> finish();
  const std::string& path() const { return path_; }

 private:
  csv_reader() = default;
  std::unique_ptr<detail::gz_file> file_;
  std::string path_;
  char delimiter_ = ',';
  std::size_t line_ = 0;
  std::string buf_;
};

}  // namespace troupe::nn
