// Raw CSV rows into records, exactly as `troupe data import csv` read the rows of a store: the same
// columns, missing-value policy, class names, standardization and hash of categorical text (a
// storage::row_format, from the store's manifest or a model's model.json). What `troupe predict`
// and `troupe serve` use on rows that come as CSV lines or as named values (a JSON object's).
//
// The import reads its rows through the same code (job/src/csv_row.hpp), so a line encoded here
// gives the very record the import stored for it, bit for bit.
//
// A row's label is optional here: a row without one (no label column, or an empty or NaN label)
// encodes its features and says so. Errors are core_errc::invalid_argument values naming the column
// and the problem: a column the row lacks, a value that is not a number, a label that is no class,
// a missing value under the policy `error` (or `skip-row`: the import dropped such rows).
// An encoder is immutable once its header is set; encode_* may be called from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/storage/record.hpp"
#include "troupe/storage/record_store.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::job {

struct encoded_row {
  bool labelled = false;  // the row had a label: record.label holds its class id (else 0)
  // With skip_dropped_rows(): a row the import would have dropped (a missing value, the format's
  // policy skip-row), not encoded; `dropped_column` names the column. Without: such a row is an error.
  bool dropped = false;
  std::string dropped_column;
  std::uint32_t filled = 0;  // dense values missing and filled (the format's policy zero or mean)
};

class row_encoder {
 public:
  // Errors (naming `where`): the format's policy or hash unknown to this build, a standardized
  // column that is not dense, a mean or std that is not finite, sparse columns without buckets.
  // With `num_classes` (a model's), a label that is a class id from it up is no class: an error
  // naming the line, as a label no class name is (0: any id; evaluate scored label 2 of a binary
  // model as a loss, and `data import csv --like` wrote it into a store of 2 classes).
  static expected<row_encoder> create(const storage::row_format& f, const std::string& where = "row format",
                                      std::uint32_t num_classes = 0);
  // From the manifest of a store made by `troupe data import csv` (its classes bound the labels); an
  // error for any other store.
  static expected<row_encoder> from_manifest(const storage::manifest& m, const std::string& where);

  row_encoder(row_encoder&&) noexcept;
  row_encoder& operator=(row_encoder&&) noexcept;
  ~row_encoder();

  const storage::row_format& format() const;

  // Where the columns are in the lines encode_line gets: the header of the file they come from
  // (default: the imported file's, format().header). Extra columns are ignored; the label may be
  // absent. Error: a dense or sparse column the header lacks, a name given twice.
  expected<void> use_header(const std::vector<std::string>& header);

  // One line (a trailing line break is dropped) split with the format's delimiter and quoting.
  // `where` (e.g. "rows.csv:12") starts every message. Error also: a malformed line, a field count
  // other than the header's.
  expected<encoded_row> encode_line(std::string_view line, storage::record& r,
                                    const std::string& where = "") const;
  // The same for a line already split and unquoted (nn::csv_reader's fields).
  expected<encoded_row> encode_fields(const std::vector<std::string>& fields, storage::record& r,
                                      const std::string& where = "") const;

  // For a batch of rows to predict: their label column is not read (a value that is no class of the
  // model, a label the rows never needed, refused the whole file).
  void ignore_label();
  // Rows the import would have dropped come back `dropped` instead of an error (a batch skips them,
  // as the model's training rows skipped them; a single request still is refused).
  void skip_dropped_rows();

  // Named values, as a JSON object gives them (numbers as their text; "" or null for a missing
  // value). Names that are no column of the format are ignored. Error also: a dense or sparse
  // column absent from `cells`.
  expected<encoded_row> encode_cells(const std::vector<std::pair<std::string, std::string>>& cells,
                                     storage::record& r, const std::string& where = "") const;

 private:
  struct impl;
  explicit row_encoder(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::job
