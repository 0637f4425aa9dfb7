// The infer request's structure read from json_scan.hpp's SAX events (infer_request.cpp checks it
// against the model): the inputs' names, datatypes, shapes and data (or, with the binary tensor data
// extension, each input's parameters.binary_data_size), the outputs asked for, the id.
// Private to infer_request.cpp; inline so that the scanner's calls per number are inlined.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::serve {

inline constexpr std::size_t max_request_depth = 64;

struct parsed_tensor {
  std::string name, datatype;
  bool has_name = false, has_datatype = false, has_shape = false, has_data = false;
  std::vector<std::int64_t> shape;
  std::vector<double> reals;              // every number of data, as a double
  std::vector<std::int64_t> ints;         // the same where each is an integer token
  std::size_t first_fraction = SIZE_MAX;  // index of the first number that is not an integer
  std::int64_t binary_size = -1;          // parameters.binary_data_size (-1: none): data after the JSON
  // Nested data ([[...], [...]]): the length of the arrays at each depth (the outermost first; -1
  // before one closed), and whether arrays of one depth differed in length or numbers sat at more
  // than one depth (a ragged tensor): a nesting must be the shape's (infer_request.cpp).
  std::vector<std::int64_t> nested;
  bool ragged = false;
  std::size_t leaf_depth = 0;  // the depth of the numbers (1: flat), 0 before the first
  std::string_view raw;        // those bytes, once the binary part is split (infer_request.cpp)
  bool binary() const { return binary_size >= 0; }
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
  bool end_array();
  bool key(std::string& k);

 private:
  enum class ctx { root, inputs, input, shape, data, params, outputs, output, skip };
  bool fail(std::string text) {
    if (problem.empty()) problem = std::move(text);
    return false;
  }
  bool pop() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }
  bool push(ctx c) {
    if (stack_.size() >= max_request_depth) return fail("the request is nested deeper than 64");
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
  bool array_at_root();   // start_array under the request's key_
  bool array_in_input();  // start_array under an input tensor's key_

  std::vector<ctx> stack_;
  std::string key_;
  // The keys met so far in the request object, the current input or output tensor, and its
  // parameters: a key given twice is refused (a second "inputs" added its tensors to the first's,
  // a second "data" its numbers, where JSON parsers keep the last).
  std::vector<std::string> root_keys_, tensor_keys_, params_keys_;
  std::vector<std::int64_t> data_counts_;  // the items of each open array of the current data
};

inline bool request_reader::end_array() {
  if (!stack_.empty() && stack_.back() == ctx::data && !data_counts_.empty()) {
    auto& t = inputs.back();
    const std::size_t level = data_counts_.size() - 1;
    if (t.nested.size() <= level) t.nested.resize(level + 1, -1);
    if (t.nested[level] < 0)
      t.nested[level] = data_counts_.back();
    else if (t.nested[level] != data_counts_.back())
      t.ragged = true;
    data_counts_.pop_back();
  }
  return pop();
}

inline bool request_reader::start_object(std::size_t) {
  if (stack_.empty()) return push(ctx::root);
  switch (stack_.back()) {
    case ctx::inputs:
      inputs.emplace_back();
      tensor_keys_.clear();
      return push(ctx::input);
    case ctx::outputs:
      outputs.emplace_back();
      tensor_keys_.clear();
      return push(ctx::output);
    case ctx::root:
      if (key_ == "inputs") return fail("'inputs' must be an array of tensors, got an object");
      if (key_ == "outputs") return fail("'outputs' must be an array, got an object");
      if (key_ == "id") return fail("'id' must be a string, got an object");
      return push(ctx::skip);
    case ctx::input:
      if (key_ == "name" || key_ == "datatype" || key_ == "shape" || key_ == "data")
        return fail(where() + "." + key_ + ": got an object");
      if (key_ != "parameters") return push(ctx::skip);
      params_keys_.clear();
      return push(ctx::params);
    case ctx::params:
      if (key_ == "binary_data_size") return fail(where() + ".parameters.binary_data_size: got an object");
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

inline bool request_reader::key(std::string& k) {
  key_ = k;
  if (stack_.empty()) return true;
  std::vector<std::string>* seen = nullptr;
  std::string in;
  switch (stack_.back()) {
    case ctx::root:
      seen = &root_keys_;
      in = "the request";
      break;
    case ctx::input:
      seen = &tensor_keys_;
      in = where();
      break;
    case ctx::output:
      seen = &tensor_keys_;
      in = "outputs[" + std::to_string(outputs.size() - 1) + "]";
      break;
    case ctx::params:
      seen = &params_keys_;
      in = where() + ".parameters";
      break;
    default:
      return true;
  }
  for (const auto& s : *seen)
    if (s == k) return fail(in + ": the key '" + k + "' is given twice");
  seen->push_back(k);
  return true;
}

inline bool request_reader::start_array(std::size_t) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got an array");
  switch (stack_.back()) {
    case ctx::root:
      return array_at_root();
    case ctx::input:
      return array_in_input();
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
    case ctx::data:  // nested rows
      ++data_counts_.back();
      data_counts_.push_back(0);
      return push(ctx::data);
    case ctx::params:
      if (key_ == "binary_data_size") return fail(where() + ".parameters.binary_data_size: got an array");
      return push(ctx::skip);
    case ctx::skip:
      return push(ctx::skip);
  }
  return false;
}

inline bool request_reader::array_at_root() {
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
}

inline bool request_reader::array_in_input() {
  if (key_ == "shape") {
    inputs.back().has_shape = true;
    inputs.back().shape.clear();
    return push(ctx::shape);
  }
  if (key_ == "data") {
    inputs.back().has_data = true;
    data_counts_.assign(1, 0);
    return push(ctx::data);
  }
  if (key_ == "name" || key_ == "datatype")
    return fail(where() + "." + key_ + ": expected a string, got an array");
  // Skipped, its binary_data_size went unseen and the binary data "added up to 0".
  if (key_ == "parameters") return fail(where() + ".parameters: expected an object, got an array");
  return push(ctx::skip);
}

inline bool request_reader::string(std::string& s) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got a string");
  switch (stack_.back()) {
    case ctx::root:
      if (key_ == "id") id = std::move(s);
      if (key_ == "inputs") return fail("'inputs' must be an array of tensors, got a string");
      if (key_ == "outputs") return fail("'outputs' must be an array, got a string");
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
      } else if (key_ == "parameters") {
        return fail(where() + ".parameters: expected an object, got a string");
      }
      return true;
    case ctx::output:
      if (key_ == "name") {
        outputs.back().name = std::move(s);
        outputs.back().has_name = true;
      }
      return true;
    case ctx::data:
      return fail(
          where() + ".data[" + std::to_string(inputs.back().reals.size()) +
          "]: a string; tensor data are numbers (or binary, after the JSON: parameters.binary_data_size "
          "and the Inference-Header-Content-Length header)");
    default:
      return scalar("a string");
  }
}

inline bool request_reader::scalar(const char* what) {
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
      // null: no parameters (clients write unset optional fields so).
      if (key_ == "parameters" && std::string_view(what) != "null")
        return fail(where() + ".parameters: expected an object, got " + what);
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
    case ctx::params:
      if (key_ == "binary_data_size")
        return fail(where() + ".parameters.binary_data_size: expected a non-negative integer, got " + what);
      return true;
    case ctx::inputs:
      return fail("inputs[" + std::to_string(inputs.size()) + "]: expected a tensor object, got " + what);
    case ctx::outputs:
      return fail("outputs[" + std::to_string(outputs.size()) + "]: expected an object, got " + what);
    case ctx::skip:
      return true;
  }
  return true;
}

inline bool request_reader::number(double d, std::int64_t i, bool integer) {
  if (stack_.empty()) return fail("the request must be a JSON object with \"inputs\", got a number");
  switch (stack_.back()) {
    case ctx::data: {
      auto& t = inputs.back();
      if (!integer && t.first_fraction == SIZE_MAX) t.first_fraction = t.reals.size();
      ++data_counts_.back();
      if (t.leaf_depth == 0) t.leaf_depth = data_counts_.size();
      if (t.leaf_depth != data_counts_.size()) t.ragged = true;
      t.reals.push_back(d);
      t.ints.push_back(i);
      return true;
    }
    case ctx::shape:
      if (!integer || i < 0)
        return fail(where() + ".shape: expected non-negative integers, got " + nlohmann::json(d).dump());
      inputs.back().shape.push_back(i);
      return true;
    case ctx::params:
      if (key_ != "binary_data_size") return true;
      if (!integer || i < 0)
        return fail(where() + ".parameters.binary_data_size: expected a non-negative integer, got " +
                    (integer ? std::to_string(i) : nlohmann::json(d).dump()));
      inputs.back().binary_size = i;
      return true;
    default:
      return scalar("a number");
  }
}

}  // namespace troupe::serve
