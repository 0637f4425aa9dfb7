// The Open Inference Protocol's JSON (KServe v2) for one model: an infer request read into the
// rows the model takes, and the answer written from its logits. Pure functions, any thread.
//
// Request (POST /v2/models/<name>/infer):
//   {"id": "7", "inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 4], "data": [...]},
//                          {"name": "ids", "datatype": "INT64", "shape": [2, 3], "data": [...]}],
//    "outputs": [{"name": "probabilities"}], "parameters": {...}}
// `data` is row-major, flat or nested ([[...], [...]]); keys may come in any order; unknown keys
// (parameters, an input's parameters) are ignored. Every problem is one message naming the field
// and what was expected, for a 400:
//   "inputs[0] 'dense': shape [2, 5], expected [rows, 4] (rows 1 to 64)".
// Answer: {"model_name", "model_version", "id" (when the request had one), "outputs": [logits FP32
// [rows, width], probabilities FP32 [rows, width] (sigmoid of a binary model's one logit, softmax
// of a multiclass model's), and for a multiclass model class_ids INT64 [rows] (the argmax) and,
// when model.json names the classes, class_names BYTES [rows]]}; "outputs" in the request picks
// some of these.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/model/model_dir.hpp"

namespace troupe::serve {

// What the endpoint checks a request against.
struct model_shape {
  bool takes_ids = false;
  std::size_t dense_dim = 0, fields = 0;
  std::uint64_t buckets_per_field = 0;  // field f's ids: [f x buckets, (f + 1) x buckets)
  std::size_t max_rows = 64;            // max_batch
  model::output_kind kind = model::output_kind::binary;
  std::size_t width = 1;
  std::vector<std::string> class_names;
};
model_shape shape_of(const model::model_info& m, std::size_t max_batch);

enum output_set : unsigned {
  out_logits = 1,
  out_probabilities = 2,
  out_class_ids = 4,
  out_class_names = 8,
};

// The output of that name for this model (0: none: class_ids and class_names are a multi-class
// model's, class_names only when model.json names the classes), and the names it has, listed.
unsigned output_bit(std::string_view name, const model_shape& shape);
std::string output_names(const model_shape& shape);

struct infer_input {
  std::string id;  // the request's "id", echoed
  std::size_t rows = 0;
  std::vector<float> dense;
  std::vector<std::int64_t> ids;
  unsigned outputs = 0;  // output_set bits; 0: every output the model has
};

// Parses and checks `body`. The error's context is the message for the client (400). `json_bytes`:
// the binary tensor data extension's Inference-Header-Content-Length (the JSON is the body's first
// json_bytes, the inputs' binary data follow); SIZE_MAX: the whole body is JSON.
expected<infer_input> parse_infer_request(std::string_view body, const model_shape& shape,
                                          std::size_t json_bytes = SIZE_MAX);

// The answer's JSON. `logits` is [rows, width].
std::string encode_infer_response(const std::string& model_name, const std::string& version,
                                  const std::string& id, const float* logits, std::size_t rows,
                                  const model_shape& shape, unsigned outputs);

// {"error": "<text>"}
std::string error_json(std::string_view text);

// "FP32 [rows, 784]"
std::string describe_input(const model_shape& shape, bool ids);

}  // namespace troupe::serve
