// The troupe_rows extension (docs/serving.md, "Raw rows"): POST /v2/models/<name>/rows takes rows
// as the columns of the CSV the model's data was imported from, by name, and encodes them as the
// import did (job::row_encoder from model.json's columns: the same hash of categorical text, the
// same standardization and missing-value policy), into the tensors /infer takes.
//
// Request: {"id": "7", "rows": [{"Age": 33, "City": "Paris", "Annual Income": null}, ...],
//           "outputs": [{"name": "probabilities"}]}
// A value is a number, a string (a number's text too) or null (a missing value, as an empty CSV
// cell); columns the model does not use (the label among them) are ignored. Every problem is one
// message for a 400 naming the row and the column: "rows[2]: column 'Age': 'abc' is not a number".
// Pure function, any thread.
#pragma once

#include <string_view>

#include "infer_codec.hpp"
#include "troupe/core/error.hpp"
#include "troupe/job/row_encoder.hpp"

namespace troupe::serve {

// `enc` null: the model has no columns (`why` says so, for the 400).
expected<infer_input> parse_rows_request(std::string_view body, const model_shape& shape,
                                         const job::row_encoder* enc, const std::string& why);

}  // namespace troupe::serve
