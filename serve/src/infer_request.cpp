// The infer request's JSON read into rows (infer_codec.hpp): the structure through json_scan.hpp's
// SAX events, then every input checked against the model. With the binary tensor data extension the
// JSON is the body's first `json_bytes` and each input with parameters.binary_data_size takes its
// bytes, in the order of "inputs", from the rest (little-endian, row-major).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "infer_codec.hpp"
#include "json_scan.hpp"
#include "request_reader.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Nested data must be nested as the shape ([[1, 2], [3, 4]] for [2, 2]); flat data fits any shape.
// Before 2026-11-30 any nesting was flattened: [[0.1], [0.2, 0.3, 0.4]] passed for [2, 2].
std::string nesting_problem(const parsed_tensor& t) {
  if (t.ragged)
    return "data: nested arrays of unequal lengths or depths (a ragged tensor), for shape " +
           shape_text(t.shape);
  if (t.nested.size() > 1 && t.nested != t.shape)
    return "data: nested as " + shape_text(t.nested) + ", not as the shape " + shape_text(t.shape);
  return "";
}

// A checked input tensor of the model: its rows, or the message.
struct tensor_spec {
  const char* name;
  const char* datatype;
  std::size_t width;
};

// A binary tensor's bytes: as many as its shape needs, and FP32 values finite (JSON cannot carry
// the others, and a model would answer NaN).
template <typename Bad>
expected<std::size_t> check_binary(const parsed_tensor& t, std::size_t expect, const tensor_spec& spec,
                                   const Bad& bad) {
  const std::size_t elem = std::string_view(spec.datatype) == "FP32" ? sizeof(float) : sizeof(std::int64_t);
  if (t.raw.size() != expect * elem)
    return bad("parameters.binary_data_size " + std::to_string(t.raw.size()) + " for shape " +
               shape_text(t.shape) + " (" + std::to_string(expect * elem) + " bytes of " + spec.datatype +
               " expected)");
  if (elem == sizeof(float)) {
    for (std::size_t k = 0; k < expect; ++k) {
      float v;
      std::memcpy(&v, t.raw.data() + k * sizeof v, sizeof v);
      if (!std::isfinite(v)) return bad("binary value " + std::to_string(k) + " is not finite");
    }
  }
  return static_cast<std::size_t>(t.shape[0]);
}

expected<std::size_t> check_tensor(const parsed_tensor& t, std::size_t index, const tensor_spec& spec,
                                   const model_shape& shape) {
  std::string where = "inputs[" + std::to_string(index) + "] '" + t.name + "'";
  auto bad = [&](const std::string& text) {
    return make_unexpected(core_errc::invalid_argument, where + ": " + text);
  };
  std::string rows_bound = "(rows 1 to " + std::to_string(shape.max_rows) + ")";
  std::string want = "[rows, " + std::to_string(spec.width) + "] " + rows_bound;
  if (!t.has_datatype) return bad("no datatype; expected \"" + std::string(spec.datatype) + "\"");
  if (t.datatype != spec.datatype)
    return bad("datatype \"" + t.datatype + "\", expected \"" + spec.datatype + "\"");
  if (!t.has_shape) return bad("no shape; expected " + want);
  if (t.shape.size() != 2 || t.shape[1] != static_cast<std::int64_t>(spec.width))
    return bad("shape " + shape_text(t.shape) + ", expected " + want);
  if (t.shape[0] < 1) return bad("shape " + shape_text(t.shape) + ": no rows " + rows_bound);
  if (t.shape[0] > static_cast<std::int64_t>(shape.max_rows))
    return bad("shape " + shape_text(t.shape) + ": " + std::to_string(t.shape[0]) +
               " rows; this server takes at most " + std::to_string(shape.max_rows) +
               " rows per request (max_batch)");
  std::size_t expect = static_cast<std::size_t>(t.shape[0]) * spec.width;
  if (t.binary()) return check_binary(t, expect, spec, bad);
  if (!t.has_data) return bad("no data");
  if (auto n = nesting_problem(t); !n.empty()) return bad(n);
  if (t.reals.size() != expect)
    return bad(std::to_string(t.reals.size()) + " values in data for shape " + shape_text(t.shape) + " (" +
               std::to_string(expect) + " expected)");
  if (std::string_view(spec.datatype) == "INT64" && t.first_fraction != SIZE_MAX)
    return bad("data[" + std::to_string(t.first_fraction) + "] is " + json(t.reals[t.first_fraction]).dump() +
               ", not an INT64");
  if (std::string_view(spec.datatype) == "FP32") {
    for (std::size_t k = 0; k < t.reals.size(); ++k) {
      double v = t.reals[k];
      if (std::fabs(v) > 3.4028234663852886e38)
        return bad("data[" + std::to_string(k) + "] is " + json(v).dump() + ", outside FP32's range");
    }
  }
  return static_cast<std::size_t>(t.shape[0]);
}

expected<unsigned> check_outputs(const request_reader& r, const model_shape& shape) {
  unsigned bits = 0;
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    const auto& o = r.outputs[i];
    std::string where = "outputs[" + std::to_string(i) + "]";
    if (!o.has_name)
      return make_unexpected(core_errc::invalid_argument,
                             where + ": no name; this model's outputs: " + output_names(shape));
    const unsigned bit = output_bit(o.name, shape);
    if (!bit)
      return make_unexpected(
          core_errc::invalid_argument,
          where + ".name '" + o.name + "': this model's outputs are " + output_names(shape));
    bits |= bit;
  }
  return bits;
}

}  // namespace

std::string output_names(const model_shape& shape) {
  if (shape.kind != model::output_kind::multiclass) return "logits, probabilities";
  return shape.class_names.empty() ? "logits, probabilities, class_ids"
                                   : "logits, probabilities, class_ids, class_names";
}

unsigned output_bit(std::string_view name, const model_shape& shape) {
  const bool multi = shape.kind == model::output_kind::multiclass;
  return name == "logits"                                               ? out_logits
         : name == "probabilities"                                      ? out_probabilities
         : multi && name == "class_ids"                                 ? out_class_ids
         : multi && !shape.class_names.empty() && name == "class_names" ? out_class_names
                                                                        : 0u;
}

model_shape shape_of(const model::model_info& m, std::size_t max_batch) {
  model_shape s;
  s.takes_ids = m.takes_ids;
  s.dense_dim = m.dense_dim;
  s.fields = m.fields;
  s.buckets_per_field = m.buckets_per_field;
  s.max_rows = max_batch;
  s.kind = m.kind;
  s.width = m.logits;
  s.class_names = m.class_names;
  return s;
}

std::string describe_input(const model_shape& shape, bool ids) {
  return ids ? "'ids' INT64 [rows, " + std::to_string(shape.fields) + "]"
             : "'dense' FP32 [rows, " + std::to_string(shape.dense_dim) + "]";
}

namespace {

// The request's inputs by name: none the model does not take, none twice, each it needs.
struct named_inputs {
  const parsed_tensor* dense = nullptr;
  const parsed_tensor* ids = nullptr;
  std::size_t dense_at = 0, ids_at = 0;  // their indexes in "inputs"
};

expected<named_inputs> name_inputs(const request_reader& r, const model_shape& shape) {
  // A model of ids alone (dense_dim 0) takes 'ids' only ('dense' of width 0 is accepted too).
  std::string takes =
      shape.dense_dim == 0 && shape.takes_ids
          ? describe_input(shape, true) + " alone (no dense values)"
          : describe_input(shape, false) + (shape.takes_ids ? " and " + describe_input(shape, true) : "");
  if (!r.has_inputs)
    return make_unexpected(core_errc::invalid_argument, "'inputs' missing: this model takes " + takes);
  named_inputs n;
  for (std::size_t i = 0; i < r.inputs.size(); ++i) {
    const auto& t = r.inputs[i];
    std::string where = "inputs[" + std::to_string(i) + "]";
    if (!t.has_name)
      return make_unexpected(core_errc::invalid_argument, where + ": no name; this model takes " + takes);
    const parsed_tensor** slot = t.name == "dense"                    ? &n.dense
                                 : t.name == "ids" && shape.takes_ids ? &n.ids
                                                                      : nullptr;
    if (!slot)
      return make_unexpected(core_errc::invalid_argument,
                             where + ".name '" + t.name + "': this model takes " + takes +
                                 (t.name == "ids" ? " (no ids: its forward is forward(dense))" : ""));
    if (*slot) return make_unexpected(core_errc::invalid_argument, where + " '" + t.name + "': given twice");
    *slot = &t;
    (t.name == "dense" ? n.dense_at : n.ids_at) = i;
  }
  if (!n.dense && shape.dense_dim > 0)
    return make_unexpected(core_errc::invalid_argument, "input 'dense' missing: this model takes " + takes);
  if (!n.ids && shape.takes_ids)
    return make_unexpected(core_errc::invalid_argument, "input 'ids' missing: this model takes " + takes);
  return n;
}

// An id outside its field's range reads a zero embedding row, as one never trained does (-1: outside
// every field's; the module reads no row for it): field 1's id 7, in field 0's range, read field 0's
// row 7 (a client that forgot the field offsets got plausible answers from other fields' rows).
void outside_their_fields_read_zero_rows(std::vector<std::int64_t>& ids, const model_shape& shape) {
  const auto b = static_cast<std::int64_t>(shape.buckets_per_field);
  if (b <= 0 || shape.fields == 0) return;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto lo = static_cast<std::int64_t>(i % shape.fields) * b;
    if (ids[i] < lo || ids[i] >= lo + b) ids[i] = -1;
  }
}

// The named tensors checked against the model and their values put into `in`: dense as FP32
// (zeros when the model reads ids alone), ids as they are.
expected<void> take_values(const named_inputs& n, const model_shape& shape, infer_input& in) {
  if (n.dense && shape.dense_dim == 0 && shape.takes_ids && n.dense->shape.size() == 2 &&
      n.dense->shape[1] != 0)
    return make_unexpected(core_errc::invalid_argument, "inputs[" + std::to_string(n.dense_at) +
                                                            "] 'dense': this model reads no dense values " +
                                                            "(dense_dim 0): send " +
                                                            describe_input(shape, true) + " alone");
  if (n.dense) {
    auto rows = check_tensor(*n.dense, n.dense_at, {"dense", "FP32", shape.dense_dim}, shape);
    if (!rows) return rows.err();
    in.rows = *rows;
    if (n.dense->binary()) {
      in.dense.resize(n.dense->raw.size() / sizeof(float));
      std::memcpy(in.dense.data(), n.dense->raw.data(), n.dense->raw.size());
    } else {
      in.dense.resize(n.dense->reals.size());
      std::transform(n.dense->reals.begin(), n.dense->reals.end(), in.dense.begin(),
                     [](double v) { return static_cast<float>(v); });
    }
  }
  if (n.ids) {
    auto rows = check_tensor(*n.ids, n.ids_at, {"ids", "INT64", shape.fields}, shape);
    if (!rows) return rows.err();
    if (n.dense && *rows != in.rows)
      return make_unexpected(core_errc::invalid_argument, "inputs[" + std::to_string(n.ids_at) +
                                                              "] 'ids' has " + std::to_string(*rows) +
                                                              " rows, 'dense' " + std::to_string(in.rows) +
                                                              ": one row of each per example");
    in.rows = *rows;
    if (n.ids->binary()) {
      in.ids.resize(n.ids->raw.size() / sizeof(std::int64_t));
      std::memcpy(in.ids.data(), n.ids->raw.data(), n.ids->raw.size());
    } else {
      in.ids = n.ids->ints;
    }
    if (!n.dense) in.dense.assign(in.rows * shape.dense_dim, 0.0f);
    outside_their_fields_read_zero_rows(in.ids, shape);
  }
  return {};
}

// Each binary input's bytes from `blob`, in the order of "inputs"; every byte taken.
expected<void> split_binary(request_reader& r, std::string_view blob, bool extension) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < r.inputs.size(); ++i) {
    auto& t = r.inputs[i];
    if (!t.binary()) continue;
    std::string where = "inputs[" + std::to_string(i) + "]" + (t.has_name ? " '" + t.name + "'" : "");
    if (!extension)
      return make_unexpected(core_errc::invalid_argument,
                             where +
                                 ": parameters.binary_data_size without the Inference-Header-Content-Length "
                                 "header (the JSON's length in bytes, the binary data after it)");
    if (t.has_data)
      return make_unexpected(core_errc::invalid_argument,
                             where + ": both data and parameters.binary_data_size");
    const auto size = static_cast<std::size_t>(t.binary_size);
    if (size > blob.size() - at)
      return make_unexpected(core_errc::invalid_argument,
                             where + ": binary_data_size " + std::to_string(size) + " at byte " +
                                 std::to_string(at) + " of the binary data, which has " +
                                 std::to_string(blob.size()) + " bytes");
    t.raw = blob.substr(at, size);
    at += size;
  }
  if (at != blob.size())
    return make_unexpected(core_errc::invalid_argument,
                           "the binary data after the JSON has " + std::to_string(blob.size()) +
                               " bytes; the inputs' binary_data_size add up to " + std::to_string(at));
  return {};
}

}  // namespace

expected<infer_input> parse_infer_request(std::string_view body, const model_shape& shape,
                                          std::size_t json_bytes) {
  const bool extension = json_bytes != SIZE_MAX;
  if (extension && json_bytes > body.size())
    return make_unexpected(core_errc::invalid_argument,
                           "Inference-Header-Content-Length " + std::to_string(json_bytes) +
                               ": the body has only " + std::to_string(body.size()) + " bytes");
  const auto blob = extension ? body.substr(json_bytes) : std::string_view();
  if (extension) body = body.substr(0, json_bytes);
  request_reader r;
  json_scanner<request_reader> scan(body, r);
  if (!scan.run() || !r.problem.empty()) {
    if (!r.problem.empty()) return make_unexpected(core_errc::invalid_argument, r.problem);
    return make_unexpected(core_errc::invalid_argument,
                           "malformed JSON (byte " + std::to_string(scan.error_at) + "): " + scan.error);
  }
  if (auto b = split_binary(r, blob, extension); !b) return b.err();
  auto named = name_inputs(r, shape);
  if (!named) return named.err();
  infer_input in;
  in.id = std::move(r.id);
  if (auto taken = take_values(*named, shape, in); !taken) return taken.err();
  auto outputs = check_outputs(r, shape);
  if (!outputs) return outputs.err();
  in.outputs = *outputs;
  return in;
}

}  // namespace troupe::serve
