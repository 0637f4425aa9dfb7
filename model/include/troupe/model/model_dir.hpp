// A trained model's directory (docs/model_format.md): `model.pt`, a TorchScript archive, and
// `model.json`, what it takes to turn a raw row into the module's inputs and where the model came
// from. read_model_dir() checks the directory and reads model.json into a model_info; every
// program that takes a model directory (serve, predict, evaluate) reads it here, so all agree on
// what a valid one is.
//
// Contract:
// - A directory without both files, or whose model.json does not parse or breaks the format, is
//   refused with one error (core_errc::io_error for a file that cannot be read, parse_error for
//   its content) whose context names the file and the problem:
//   "jobs/7/model/model.json: output.logits is 3, but a multiclass model of 10 classes has 10".
// - Nothing is loaded: model.pt is only checked to be a regular file. Loading it is the
//   predictor's (predictor.hpp).
// - Keys the format does not know are ignored (a newer troupe may add some); a format_version
//   above the one this build reads is refused, naming both.
// - Pure functions, no state: safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::model {

inline constexpr int kModelFormatVersion = 1;

enum class output_kind { binary, multiclass };

// The raw row (`columns` of model.json): present when the training store came from
// `troupe data import csv`.
struct model_columns {
  // Every column of the imported CSV in file order (where raw lines have each column); empty:
  // lines hold label, dense and sparse columns in that order.
  std::vector<std::string> header;
  std::string label;  // may be empty: a row to predict need not have it
  std::vector<std::string> dense, sparse;
  std::string delimiter = ",";
  std::string hash = "troupe-category-v1";
  std::string missing = "zero";  // error | zero | mean | skip-row
  struct moments {
    double mean = 0, std = 1;
  };
  std::map<std::string, moments> standardize;  // dense column -> its import's mean and std
  std::map<std::string, double> fill;          // missing "mean": dense column -> its missing value
};

// Where the model came from (`job` of model.json); empty fields where it does not say.
struct model_origin {
  std::string id, strategy, from;  // from: "final" or "checkpoint"
  std::int64_t epochs = 0, step = 0;
};

struct model_info {
  std::string dir;         // the directory as given
  std::string pt_path;     // dir + "/model.pt"
  std::string model;       // lr, mlp, cnn, wide_deep, deepfm, torchscript
  bool takes_ids = false;  // forward(dense, ids) rather than forward(dense)
  std::size_t dense_dim = 0;
  std::size_t fields = 0;  // sparse fields: ids is [rows, fields]
  std::uint64_t buckets_per_field = 0;
  output_kind kind = output_kind::binary;
  std::size_t classes = 2;  // 2 for binary
  std::size_t logits = 1;   // the width of forward's output: 1 (binary) or classes
  std::vector<std::string> class_names;
  std::optional<model_columns> columns;
  model_origin job;
  std::int64_t created_unix_ms = 0;
  std::string troupe_version;

  // What answers say to name this model: "<job id>@<created_unix_ms>" ("<dir name>@..." without a
  // job id). Two directories written by one job at one millisecond are the same version.
  std::string version() const;
};

// Reads and checks `dir` (see the contract above).
expected<model_info> read_model_dir(const std::string& dir);
// The same checks on model.json's text, as if read from `dir` (tests, and a watcher that has the
// text already). Does not look at model.pt.
expected<model_info> parse_model_json(const std::string& text, const std::string& dir);

// Empty when a client of `served` can send the same requests to `next` and read its answers the
// same way (same inputs, widths, output kind and class names; raw rows that name every column `next`
// reads); else why not, naming both values: "the served model takes 784 dense values a row, the
// new one takes 100 dense values a row".
std::string incompatibility(const model_info& served, const model_info& next);

std::string to_string(output_kind k);

// What it takes to encode a raw row for this model (job::row_encoder), from model.json's `columns`
// and class names; an error when model.json has no `columns` (its data did not come from a CSV).
expected<storage::row_format> row_format_of(const model_info& m);

// [model] init `init` (a model directory, or a job directory holding model/) against the record
// store `train_store` the job trains on, where both say how their rows were encoded (model.json's
// columns, the store's manifest: both imported from CSV). Errors (invalid_argument) where the
// warm-started model would read the rows otherwise in a way training does not undo: another class
// behind an id (a day's import numbered its classes anew), other columns, another hash. A
// difference training adapts to (standardization, missing values) is returned as a warning
// ("" when none). Nothing to compare (a state directory, a store not from CSV): "".
expected<std::string> check_init_encoding(const std::string& init, const std::string& train_store);

}  // namespace troupe::model
