// The infer request's JSON read into rows (infer_codec.hpp): the structure through json_scan.hpp's
// SAX events, then every input checked against the model.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "infer_codec.hpp"
#include "json_scan.hpp"

namespace troupe::serve {

namespace {

using nlohmann::json;

constexpr std::size_t max_depth = 64;

struct parsed_tensor {
  std::string name, datatype;
  bool has_name = false, has_datatype = false, has_shape = false, has_data = false;
  std::vector<std::int64_t> shape;
  std::vector<double> reals;              // every number of data, as a double
  std::vector<std::int64_t> ints;         // the same where each is an integer token
  std::size_t first_fraction = SIZE_MAX;  // index of the first number that is not an integer
};

struct parsed_output {
  std::string name;
  bool has_name = false;
};

// The request's structure from json_scan.hpp's SAX events, without building a document: numbers of
// `data` go straight into their tensor. Returns false (the scan stops) at the first problem.
class request_reader {
 public:
  std::string problem;
  std::string id;
  bool has_inputs = false, has_outputs = false;
  std::vector<parsed_tensor> inputs;
  std::vector<parsed_output> outputs;

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(std::int64_t v) { return number(static_cast<double>(v), v, true); }
  bool number_unsigned(std::uint64_t v) {
    if (v > static_cast<std::uint64_t>(INT64_MAX)) return number(static_cast<double>(v), 0, false);
    return number(static_cast<double>(v), static_cast<std::int64_t>(v), true);
  }
  bool number_float(double v, const std::string&) { return number(v, 0, false); }
  bool string(std::string& s);
  bool start_object(std::size_t);
  bool end_object() { return pop(); }
  bool start_array(std::size_t);
  bool end_array() { return pop(); }
  bool key(std::string& k) {
    key_ = k;
    return true;
  }

 private:
  enum class ctx { root, inputs, input, shape, data, outputs, output, skip };
  bool fail(std::string text) {
    if (problem.empty()) problem = std::move(text);
    return false;
  }
  bool pop() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }
  bool push(ctx c) {
    if (stack_.size() >= max_depth) return fail("the request is nested deeper than 64");
    stack_.push_back(c);
    return true;
  }
  std::string where() const {
    const auto& t = inputs.back();
    return "inputs[" + std::to_string(inputs.size() - 1) + "]" +
           (t.has_name ? " '" + t.name + "'" : std::string());
  }
  bool scalar(const char* what);
  bool number(double d, std::int64_t i, bool integer);

  std::vector<ctx> stack_;
  std::string key_;
};

bool request_reader::start_object(std::size_t) {
  if (stack_.empty()) return push(ctx::root);
  switch (stack_.back()) {
    case ctx::inputs:
      inputs.emplace_back();
      return push(ctx::input);
    case ctx::outputs:
      outputs.emplace_back();
      return push(ctx::output);
    case ctx::root:
      if (key_ == "inputs") return fail("'inputs' must be an array of tensors, got an object");
      if (key_ == "outputs") return fail("'outputs' must be an array, got an object");
      if (key_ == "id") return fail("'id' must be a string, got an object");
      return push(ctx::skip);
    case ctx::input:
      if (key_ == "name" || key_ == "datatype" || key_ == "shape" || key_ == "data")
        return fail(where() + "." + key_ + ": got an object");
      return push(ctx::skip);
    case ctx::output:
      if (key_ == "name")
        return fail("outputs[" + std::to_string(outputs.size() - 1) + "].name: got an object");
      return push(ctx::skip);
    case ctx::shape:
      return fail(where() + ".shape: expected integers, got an object");
    case ctx::data:
      return fail(where() + ".data: expected numbers, got an object");
    case ctx::skip:
      return push(ctx::skip);
  }
  return false;
}

bool request_reader::start_array(std::size_t) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got an array");
  switch (stack_.back()) {
    case ctx::root:
      if (key_ == "inputs") {
        has_inputs = true;
        return push(ctx::inputs);
      }
      if (key_ == "outputs") {
        has_outputs = true;
        return push(ctx::outputs);
      }
      if (key_ == "id") return fail("'id' must be a string, got an array");
      return push(ctx::skip);
    case ctx::input:
      if (key_ == "shape") {
        inputs.back().has_shape = true;
        inputs.back().shape.clear();
        return push(ctx::shape);
      }
      if (key_ == "data") {
        inputs.back().has_data = true;
        return push(ctx::data);
      }
      if (key_ == "name" || key_ == "datatype")
        return fail(where() + "." + key_ + ": expected a string, got an array");
      return push(ctx::skip);
    case ctx::output:
      if (key_ == "name")
        return fail("outputs[" + std::to_string(outputs.size() - 1) + "].name: got an array");
      return push(ctx::skip);
    case ctx::inputs:
      return fail("inputs[" + std::to_string(inputs.size()) + "]: expected a tensor object, got an array");
    case ctx::outputs:
      return fail("outputs[" + std::to_string(outputs.size()) + "]: expected an object, got an array");
    case ctx::shape:
      return fail(where() + ".shape: expected integers, got an array");
    case ctx::data:
      return push(ctx::data);  // nested rows
    case ctx::skip:
      return push(ctx::skip);
  }
  return false;
}

bool request_reader::string(std::string& s) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got a string");
  switch (stack_.back()) {
    case ctx::root:
      if (key_ == "id") id = std::move(s);
      if (key_ == "inputs") return fail("'inputs' must be an array of tensors, got a string");
      return true;
    case ctx::input:
      if (key_ == "name") {
        inputs.back().name = std::move(s);
        inputs.back().has_name = true;
      } else if (key_ == "datatype") {
        inputs.back().datatype = std::move(s);
        inputs.back().has_datatype = true;
      } else if (key_ == "shape" || key_ == "data") {
        return fail(where() + "." + key_ + ": expected an array, got a string");
      }
      return true;
    case ctx::output:
      if (key_ == "name") {
        outputs.back().name = std::move(s);
        outputs.back().has_name = true;
      }
      return true;
    case ctx::data:
      return fail(where() + ".data[" + std::to_string(inputs.back().reals.size()) +
                  "]: a string; tensor data are numbers (the binary data extension is not supported)");
    default:
      return scalar("a string");
  }
}

bool request_reader::scalar(const char* what) {
  if (stack_.empty())
    return fail(std::string("the request must be a JSON object with \"inputs\", got ") + what);
  switch (stack_.back()) {
    case ctx::root:
      if (key_ == "id") return fail(std::string("'id' must be a string, got ") + what);
      if (key_ == "inputs" || key_ == "outputs") return fail("'" + key_ + "' must be an array, got " + what);
      return true;
    case ctx::input:
      if (key_ == "name" || key_ == "datatype")
        return fail(where() + "." + key_ + ": expected a string, got " + what);
      if (key_ == "shape" || key_ == "data")
        return fail(where() + "." + key_ + ": expected an array, got " + what);
      return true;
    case ctx::output:
      if (key_ == "name")
        return fail("outputs[" + std::to_string(outputs.size() - 1) + "].name: expected a string, got " +
                    what);
      return true;
    case ctx::shape:
      return fail(where() + ".shape: expected non-negative integers, got " + what);
    case ctx::data:
      return fail(where() + ".data[" + std::to_string(inputs.back().reals.size()) + "]: " + what +
                  "; tensor data are numbers");
    case ctx::inputs:
      return fail("inputs[" + std::to_string(inputs.size()) + "]: expected a tensor object, got " + what);
    case ctx::outputs:
      return fail("outputs[" + std::to_string(outputs.size()) + "]: expected an object, got " + what);
    case ctx::skip:
      return true;
  }
  return true;
}

bool request_reader::number(double d, std::int64_t i, bool integer) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got a number");
  switch (stack_.back()) {
    case ctx::data: {
      auto& t = inputs.back();
      if (!integer && t.first_fraction == SIZE_MAX) t.first_fraction = t.reals.size();
      t.reals.push_back(d);
      t.ints.push_back(i);
      return true;
    }
    case ctx::shape:
      if (!integer || i < 0)
        return fail(where() + ".shape: expected non-negative integers, got " + json(d).dump());
      inputs.back().shape.push_back(i);
      return true;
    default:
      return scalar("a number");
  }
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A checked input tensor of the model: its rows, or the message.
struct tensor_spec {
  const char* name;
  const char* datatype;
  std::size_t width;
};

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
  if (!t.has_data) return bad("no data");
  std::size_t expect = static_cast<std::size_t>(t.shape[0]) * spec.width;
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
  bool multi = shape.kind == model::output_kind::multiclass;
  std::string have = multi ? (shape.class_names.empty() ? "logits, probabilities, class_ids"
                                                        : "logits, probabilities, class_ids, class_names")
                           : "logits, probabilities";
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    const auto& o = r.outputs[i];
    std::string where = "outputs[" + std::to_string(i) + "]";
    if (!o.has_name)
      return make_unexpected(core_errc::invalid_argument, where + ": no name; this model's outputs: " + have);
    unsigned bit = o.name == "logits"                                               ? out_logits
                   : o.name == "probabilities"                                      ? out_probabilities
                   : multi && o.name == "class_ids"                                 ? out_class_ids
                   : multi && !shape.class_names.empty() && o.name == "class_names" ? out_class_names
                                                                                    : 0u;
    if (!bit)
      return make_unexpected(core_errc::invalid_argument,
                             where + ".name '" + o.name + "': this model's outputs are " + have);
    bits |= bit;
  }
  return bits;
}

}  // namespace

model_shape shape_of(const model::model_info& m, std::size_t max_batch) {
  model_shape s;
  s.takes_ids = m.takes_ids;
  s.dense_dim = m.dense_dim;
  s.fields = m.fields;
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

expected<infer_input> parse_infer_request(std::string_view body, const model_shape& shape) {
  request_reader r;
  json_scanner<request_reader> scan(body, r);
  if (!scan.run() || !r.problem.empty()) {
    if (!r.problem.empty()) return make_unexpected(core_errc::invalid_argument, r.problem);
    return make_unexpected(core_errc::invalid_argument,
                           "malformed JSON (byte " + std::to_string(scan.error_at) + "): " + scan.error);
  }
  std::string takes =
      describe_input(shape, false) + (shape.takes_ids ? " and " + describe_input(shape, true) : "");
  if (!r.has_inputs)
    return make_unexpected(core_errc::invalid_argument, "'inputs' missing: this model takes " + takes);
  const parsed_tensor* dense = nullptr;
  const parsed_tensor* ids = nullptr;
  std::size_t dense_at = 0, ids_at = 0;
  for (std::size_t i = 0; i < r.inputs.size(); ++i) {
    const auto& t = r.inputs[i];
    std::string where = "inputs[" + std::to_string(i) + "]";
    if (!t.has_name)
      return make_unexpected(core_errc::invalid_argument, where + ": no name; this model takes " + takes);
    const parsed_tensor** slot = t.name == "dense"                    ? &dense
                                 : t.name == "ids" && shape.takes_ids ? &ids
                                                                      : nullptr;
    if (!slot)
      return make_unexpected(core_errc::invalid_argument,
                             where + ".name '" + t.name + "': this model takes " + takes +
                                 (t.name == "ids" ? " (no ids: its forward is forward(dense))" : ""));
    if (*slot) return make_unexpected(core_errc::invalid_argument, where + " '" + t.name + "': given twice");
    *slot = &t;
    (t.name == "dense" ? dense_at : ids_at) = i;
  }
  if (!dense && shape.dense_dim > 0)
    return make_unexpected(core_errc::invalid_argument, "input 'dense' missing: this model takes " + takes);
  if (!ids && shape.takes_ids)
    return make_unexpected(core_errc::invalid_argument, "input 'ids' missing: this model takes " + takes);
  infer_input in;
  in.id = std::move(r.id);
  if (dense) {
    auto rows = check_tensor(*dense, dense_at, {"dense", "FP32", shape.dense_dim}, shape);
    if (!rows) return rows.err();
    in.rows = *rows;
    in.dense.resize(dense->reals.size());
    std::transform(dense->reals.begin(), dense->reals.end(), in.dense.begin(),
                   [](double v) { return static_cast<float>(v); });
  }
  if (ids) {
    auto rows = check_tensor(*ids, ids_at, {"ids", "INT64", shape.fields}, shape);
    if (!rows) return rows.err();
    if (dense && *rows != in.rows)
      return make_unexpected(core_errc::invalid_argument, "inputs[" + std::to_string(ids_at) +
                                                              "] 'ids' has " + std::to_string(*rows) +
                                                              " rows, 'dense' " + std::to_string(in.rows) +
                                                              ": one row of each per example");
    in.rows = *rows;
    in.ids = ids->ints;
    if (!dense) in.dense.assign(in.rows * shape.dense_dim, 0.0f);
  }
  auto outputs = check_outputs(r, shape);
  if (!outputs) return outputs.err();
  in.outputs = *outputs;
  return in;
}

}  // namespace troupe::serve
