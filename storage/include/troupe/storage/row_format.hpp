// What it takes to turn a raw CSV row into a record the way `troupe data import csv` did: the
// columns, the delimiter, the missing-value policy, the hash of categorical text, the class names
// of string labels and the standardization of dense columns. A store imported from CSV keeps it in
// its manifest (`[columns]`, docs/storage_format.md); a model directory's model.json carries the
// same fields (`columns`, `class_names`: docs/model_format.md). A plain value: whoever reads either
// fills it, and job::row_encoder (troupe/job/row_encoder.hpp) checks and applies it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::storage {

// nn::category_id(text, field, buckets_per_field): the only hash there is so far.
inline constexpr const char* category_hash_v1 = "troupe-category-v1";

// A standardized dense column: value -> (value - mean) / std, or value - mean when std is 0 (a
// column constant in the training rows is only centred).
struct column_scale {
  std::string column;
  double mean = 0;
  double std = 1;
  bool operator==(const column_scale&) const = default;
};

struct row_format {
  // Every column of the CSV file in file order, ignored ones too (the positions of raw lines).
  // Empty: raw lines hold the label, the dense and the sparse columns in that order.
  std::vector<std::string> header;
  std::string label;
  std::vector<std::string> dense, sparse;  // record order: dense value i is dense[i]'s
  char delimiter = ',';
  std::string missing = "error";  // error | zero | mean | skip-row, as `--missing`
  std::string hash = category_hash_v1;
  std::uint64_t buckets_per_field = 0;  // ids per sparse column
  // Labels that were text: class i is class_names[i]. Empty: the labels were class ids.
  std::vector<std::string> class_names;
  std::vector<column_scale> standardize;  // dense columns standardized at import, in dense order
  // missing = "mean": what a missing dense value reads as, one per dense column in its order (the
  // mean of the column's present values in the training rows, before standardizing). Else empty.
  std::vector<double> fill;
  bool operator==(const row_format&) const = default;
};

// What to compare of two encodings (encoding_difference).
struct encoding_parts {
  bool classes = true;  // class names (not for predicting, which reads no labels)
  bool scaling = true;  // standardization, missing-value rule and fills (a warm start adapts to them)
};

// The first way rows encoded as `b` says would read otherwise to a model trained on rows encoded
// as `a` says, "" when none: another class behind an id, other dense or sparse columns (or order),
// another hash or bucket count, another standardization (a relative difference over 1e-6),
// missing-value rule or fill. `a_name` and `b_name` name them: "class 1 is 'cat' in the model's
// data (m/model.json), 'cow' in --data s".
std::string encoding_difference(const row_format& a, const row_format& b, const std::string& a_name,
                                const std::string& b_name, encoding_parts parts = {});

}  // namespace troupe::storage
