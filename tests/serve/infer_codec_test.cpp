// The infer request's JSON (serve/src/infer_codec.hpp): what is accepted, and for each bad input
// the message that names the field and what was expected; the answer's JSON.
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "../../serve/src/infer_codec.hpp"
#include "../../serve/src/json_scan.hpp"
#include "mutate.hpp"

namespace troupe::serve {
namespace {

using nlohmann::json;

model_shape dense_model() {
  model_shape s;
  s.dense_dim = 3;
  s.max_rows = 4;
  s.kind = model::output_kind::multiclass;
  s.width = 3;
  s.class_names = {"a", "b", "c"};
  return s;
}

model_shape sparse_model() {
  model_shape s;
  s.takes_ids = true;
  s.dense_dim = 2;
  s.fields = 2;
  s.max_rows = 4;
  s.kind = model::output_kind::binary;
  s.width = 1;
  return s;
}

std::string bad(const std::string& body, const model_shape& s = dense_model()) {
  auto r = parse_infer_request(body, s);
  EXPECT_FALSE(r) << body;
  return r ? "" : r.err().context();
}

TEST(infer_codec, reads_flat_and_nested_data_in_any_key_order) {
  auto r = parse_infer_request(
      R"({"id": "q7", "parameters": {"x": [1, {"y": 2}]},
          "inputs": [{"data": [[1, 2.5, -3], [4e-1, 0, 1]], "parameters": {"content_type": "x"},
                      "shape": [2, 3], "datatype": "FP32", "name": "dense"}],
          "outputs": [{"name": "class_ids"}, {"name": "logits"}]})",
      dense_model());
  ASSERT_TRUE(r) << r.err().context();
  EXPECT_EQ(r->id, "q7");
  EXPECT_EQ(r->rows, 2u);
  EXPECT_EQ(r->dense, (std::vector<float>{1, 2.5f, -3, 0.4f, 0, 1}));
  EXPECT_EQ(r->outputs, out_class_ids | out_logits);
  auto s = parse_infer_request(
      R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [5, 9007199254740993]},
                     {"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})",
      sparse_model());
  ASSERT_TRUE(s) << s.err().context();
  EXPECT_EQ(s->ids, (std::vector<std::int64_t>{5, 9007199254740993}));  // exact beyond 2^53
  EXPECT_EQ(s->outputs, 0u);
}

// An id outside its field's range reads a zero row (-1), as docs/serving.md says: one in another
// field's range read that field's row (a client that forgot the offsets got other fields' rows).
TEST(infer_codec, ids_outside_their_fields_range_read_zero_rows) {
  auto shape = sparse_model();
  shape.buckets_per_field = 100;
  auto r = parse_infer_request(
      R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [3, 2], "data": [[5, 107], [150, 7], [-3, 199]]},
                     {"name": "dense", "datatype": "FP32", "shape": [3, 2], "data": [1, 2, 3, 4, 5, 6]}]})",
      shape);
  ASSERT_TRUE(r) << r.err().context();
  EXPECT_EQ(r->ids, (std::vector<std::int64_t>{5, 107, -1, -1, -1, 199}));
}

// Nested data must be nested as the shape says (row-major); it was flattened whatever its nesting,
// so a ragged tensor of the right count passed.
TEST(infer_codec, nested_data_must_be_nested_as_its_shape) {
  auto req = [](const std::string& data, const std::string& shape = "[2, 3]") {
    return R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": )" + shape + R"(, "data": )" + data +
           "}]}";
  };
  EXPECT_TRUE(parse_infer_request(req("[[1, 2, 3], [4, 5, 6]]"), dense_model()));
  EXPECT_TRUE(parse_infer_request(req("[1, 2, 3, 4, 5, 6]"), dense_model())) << "flat data fits any shape";
  EXPECT_EQ(
      bad(req("[[1], [2, 3, 4, 5, 6]]")),
      "inputs[0] 'dense': data: nested arrays of unequal lengths or depths (a ragged tensor), for shape "
      "[2, 3]");
  EXPECT_EQ(bad(req("[[1, 2], [3, 4], [5, 6]]")),
            "inputs[0] 'dense': data: nested as [3, 2], not as the shape [2, 3]");
  EXPECT_EQ(bad(req("[[[1, 2, 3]], [[4, 5, 6]]]")),
            "inputs[0] 'dense': data: nested as [2, 1, 3], not as the shape [2, 3]");
  EXPECT_NE(bad(req("[[1, 2, 3], 4, 5, 6]")).find("a ragged tensor"), std::string::npos);
  EXPECT_NE(bad(req("[[[[1]]], [[2]], [[3]]]", "[1, 3]"), dense_model()).find("a ragged tensor"),
            std::string::npos);
}

TEST(infer_codec, strings_and_numbers_read_as_nlohmann_reads_them) {
  auto r = parse_infer_request(
      R"({"id": "\u00e9\ud83d\ude00 caf\u00e9 \"q\"", "inputs": [{"name": "dense", "datatype": "FP32",
          "shape": [1, 3], "data": [1, 2, 3]}]})",
      dense_model());
  ASSERT_TRUE(r) << r.err().context();
  EXPECT_EQ(r->id, "\xc3\xa9\xf0\x9f\x98\x80 caf\xc3\xa9 \"q\"");
  // Random numbers in the forms clients print them: every float equal to nlohmann's (strtod) reading.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> mant(-10, 10);
  std::uniform_int_distribution<int> exp(-37, 36);  // within FP32's range
  std::string data;
  std::vector<double> want;
  const int n = 3000;
  char buf[64];
  for (int i = 0; i < n; ++i) {
    double v = mant(rng) * std::pow(10.0, exp(rng));
    const char* fmt = i % 3 == 0 ? "%.17g" : i % 3 == 1 ? "%.9g" : "%.6e";
    std::snprintf(buf, sizeof buf, fmt, v);
    if (i) data += ',';
    data += buf;
  }
  std::string body =
      R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1000, 3], "data": [)" + data + "]}]}";
  auto big = dense_model();
  big.max_rows = 1000;
  auto got = parse_infer_request(body, big);
  ASSERT_TRUE(got) << got.err().context();
  auto ref = json::parse(body)["inputs"][0]["data"];
  ASSERT_EQ(got->dense.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(got->dense[i], static_cast<float>(ref[i].get<double>())) << i;
}

// The scanner's numbers, token by token, against std::from_chars on the same text: every double the
// same bits (Clinger's fast path where it is exact, from_chars elsewhere), every integer the same.
struct number_log {
  std::vector<double> floats;
  std::vector<std::int64_t> ints;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(std::int64_t v) { return ints.push_back(v), floats.push_back(0), true; }
  bool number_unsigned(std::uint64_t v) {
    return ints.push_back(static_cast<std::int64_t>(v)), floats.push_back(0), true;
  }
  bool number_float(double v, const std::string&) { return ints.push_back(0), floats.push_back(v), true; }
  bool string(std::string&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(std::string&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
};

TEST(infer_codec, numbers_read_bit_for_bit_as_from_chars_reads_them) {
  std::vector<std::string> tokens = {"0",
                                     "-0",
                                     "0.0",
                                     "-0.0",
                                     "1e22",
                                     "1e23",
                                     "9007199254740993",
                                     "123456789012345.6",
                                     "1234567890123456.7",
                                     "0.000123",
                                     "1.50",
                                     "2.2250738585072014e-308",
                                     "1.7976931348623157e308",
                                     "0e5",
                                     "-12E-3",
                                     "999999999999999999",
                                     "1000000000000000000",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "3.14159265358979323846",
                                     "0.1",
                                     "0.2",
                                     "0.3",
                                     "1e-22",
                                     "1e-23",
                                     "123456789012345e-22",
                                     "123456789012345e-23",
                                     "0.00000000000000000000001234",
                                     "1234567890123456789012"};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mant(-10, 10);
  std::uniform_int_distribution<int> exp(-40, 40), fmt_pick(0, 5);
  const char* fmts[] = {"%.17g", "%.9g", "%.6e", "%.3f", "%.15g", "%g"};
  char buf[64];
  for (int i = 0; i < 20000; ++i) {
    std::snprintf(buf, sizeof buf, fmts[fmt_pick(rng)], mant(rng) * std::pow(10.0, exp(rng)));
    tokens.emplace_back(buf);
  }
  std::string text = "[";
  for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? "," : "") + tokens[i];
  text += "]";
  number_log log;
  json_scanner<number_log> scan(text, log);
  ASSERT_TRUE(scan.run()) << scan.error;
  ASSERT_EQ(log.floats.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    const bool integer = t.find_first_of(".eE") == std::string::npos;
    std::int64_t iv = 0;
    if (integer && std::from_chars(t.data(), t.data() + t.size(), iv).ec == std::errc{}) {
      EXPECT_EQ(log.ints[i], iv) << t;
      continue;
    }
    std::uint64_t uv = 0;
    if (integer && t[0] != '-' && std::from_chars(t.data(), t.data() + t.size(), uv).ec == std::errc{}) {
      EXPECT_EQ(static_cast<std::uint64_t>(log.ints[i]), uv) << t;
      continue;
    }
    double want = 0;
    ASSERT_EQ(std::from_chars(t.data(), t.data() + t.size(), want).ec, std::errc{}) << t;
    EXPECT_EQ(std::memcmp(&log.floats[i], &want, sizeof want), 0)
        << t << ": " << log.floats[i] << " vs " << want;
  }
}

TEST(infer_codec, every_bad_input_names_the_field_and_the_expected_shape) {
  EXPECT_EQ(bad("{\"inputs\": [}"), "malformed JSON (byte 13): unexpected '}'");
  EXPECT_EQ(bad(""), "malformed JSON (byte 1): unexpected end of input");
  EXPECT_EQ(bad("{\"x\": [1,]}"), "malformed JSON (byte 10): unexpected ']'");
  EXPECT_EQ(bad("{\"inputs\" [1]}"), "malformed JSON (byte 11): expected ':', got '['");
  EXPECT_EQ(bad("{\"id\": \"a\nb\"}"),
            "malformed JSON (byte 10): a control character in a string (escape it)");
  EXPECT_EQ(bad("{\"id\": \"\\ud800\"}"), "malformed JSON (byte 15): a lone surrogate in a \\u escape");
  EXPECT_EQ(bad("{\"id\": \"\xff\"}"), "malformed JSON (byte 9): invalid UTF-8 in a string");
  EXPECT_EQ(bad("{\"x\": [01]}"), "malformed JSON (byte 9): expected ',' or ']', got '1'");
  EXPECT_EQ(bad("{\"x\": [1.]}"), "malformed JSON (byte 10): invalid number: no digit after '.'");
  EXPECT_EQ(bad("{\"x\": [1e999]}"), "malformed JSON (byte 8): number out of range: 1e999");
  EXPECT_EQ(bad("{} x"), "malformed JSON (byte 4): unexpected 'x' after the JSON value");
  EXPECT_EQ(bad("{\"inputs\": tru}"), "malformed JSON (byte 12): invalid literal");
  EXPECT_EQ(bad("[1, 2]"), "the request must be a JSON object with \"inputs\", got an array");
  EXPECT_EQ(bad("3"), "the request must be a JSON object with \"inputs\", got a number");
  EXPECT_EQ(bad("{}"), "'inputs' missing: this model takes 'dense' FP32 [rows, 3]");
  EXPECT_EQ(bad(R"({"inputs": {"name": "dense"}})"), "'inputs' must be an array of tensors, got an object");
  EXPECT_EQ(bad(R"({"outputs": "x", "inputs": []})"), "'outputs' must be an array, got a string");
  EXPECT_EQ(bad(R"({"outputs": 3})"), "'outputs' must be an array, got a number");
  EXPECT_EQ(bad(R"({"inputs": [3]})"), "inputs[0]: expected a tensor object, got a number");
  EXPECT_EQ(bad(R"({"inputs": [{"datatype": "FP32"}]})"),
            "inputs[0]: no name; this model takes 'dense' FP32 [rows, 3]");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "pixels"}]})"),
            "inputs[0].name 'pixels': this model takes 'dense' FP32 [rows, 3]");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "ids"}]})"),
            "inputs[0].name 'ids': this model takes 'dense' FP32 [rows, 3] (no ids: its forward is "
            "forward(dense))");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP64", "shape": [1, 3], "data": [1, 2, 3]}]})"),
            "inputs[0] 'dense': datatype \"FP64\", expected \"FP32\"");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "shape": [1, 3], "data": [1, 2, 3]}]})"),
            "inputs[0] 'dense': no datatype; expected \"FP32\"");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 5], "data": [1]}]})"),
            "inputs[0] 'dense': shape [2, 5], expected [rows, 3] (rows 1 to 4)");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]})"),
            "inputs[0] 'dense': shape [3], expected [rows, 3] (rows 1 to 4)");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [0, 3], "data": []}]})"),
            "inputs[0] 'dense': shape [0, 3]: no rows (rows 1 to 4)");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [5, 3], "data": []}]})"),
      "inputs[0] 'dense': shape [5, 3]: 5 rows; this server takes at most 4 rows per request (max_batch)");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3]}]})"),
            "inputs[0] 'dense': 3 values in data for shape [2, 3] (6 expected)");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, "2", 3]}]})"),
      "inputs[0] 'dense'.data[1]: a string; tensor data are numbers (or binary, after the JSON: "
      "parameters.binary_data_size and the Inference-Header-Content-Length header)");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, null, 3]}]})"),
      "inputs[0] 'dense'.data[1]: null; tensor data are numbers");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 1e300]}]})"),
      "inputs[0] 'dense': data[2] is 1e+300, outside FP32's range");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, -3], "data": []}]})"),
            "inputs[0] 'dense'.shape: expected non-negative integers, got -3.0");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": "1,3", "data": []}]})"),
            "inputs[0] 'dense'.shape: expected an array, got a string");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [{"x": 1}]}]})"),
      "inputs[0] 'dense'.data: expected numbers, got an object");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
                               {"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]})"),
            "inputs[1] 'dense': given twice");
  // A key given twice in one object is refused (a second "inputs" added its tensors to the first's,
  // a second "data" its numbers); the same key in two tensors is not a duplicate.
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}],
                    "inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]})"),
            "the request: the key 'inputs' is given twice");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3], "data": [4]}]})"),
      "inputs[0] 'dense': the key 'data' is given twice");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}],
                    "outputs": [{"name": "logits", "name": "class_ids"}]})"),
            "outputs[0]: the key 'name' is given twice");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3],
                    "parameters": {"binary_data_size": 12, "binary_data_size": 4}}]})"),
            "inputs[0] 'dense'.parameters: the key 'binary_data_size' is given twice");
  EXPECT_EQ(bad(R"({"id": 7, "inputs": []})"), "'id' must be a string, got a number");
  EXPECT_EQ(
      bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}],
                    "outputs": [{"name": "embedding"}]})"),
      "outputs[0].name 'embedding': this model's outputs are logits, probabilities, class_ids, class_names");
  // Sparse model.
  auto s = sparse_model();
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]})", s),
            "input 'ids' missing: this model takes 'dense' FP32 [rows, 2] and 'ids' INT64 [rows, 2]");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
                               {"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [1, 2.5]}]})",
                s),
            "inputs[1] 'ids': data[1] is 2.5, not an INT64");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
                               {"name": "ids", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}]})",
                s),
            "inputs[1] 'ids': datatype \"INT32\", expected \"INT64\"");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
                               {"name": "ids", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}]})",
                s),
            "inputs[1] 'ids' has 2 rows, 'dense' 1: one row of each per example");
  EXPECT_EQ(bad(R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}],
                    "outputs": [{"name": "class_ids"}]})",
                s),
            "input 'dense' missing: this model takes 'dense' FP32 [rows, 2] and 'ids' INT64 [rows, 2]");
}

TEST(infer_codec, deep_nesting_is_refused_without_recursion) {
  std::string deep = R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": )" +
                     std::string(100000, '[') + "1" + std::string(100000, ']') + "}]}";
  EXPECT_EQ(bad(deep), "the request is nested deeper than 64");
}

TEST(infer_codec, random_bytes_never_crash_the_parser) {
  std::mt19937 rng(11);
  const std::string base =
      R"({"id": "x", "inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]})";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = base;
    mutate(rng, s, "[]{}\",:0-e.");
    auto r = parse_infer_request(s, dense_model());
    if (r) {
      ++accepted;
      EXPECT_EQ(r->dense.size(), r->rows * 3);
    } else {
      EXPECT_FALSE(r.err().context().empty());
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(infer_codec, the_answer_has_logits_probabilities_and_class_ids) {
  float logits[] = {1, 2, 3, 0, 0, 0};
  auto text = encode_infer_response("m", "job@1", "q\"1", logits, 2, dense_model(), 0);
  auto j = json::parse(text);
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "job@1");
  EXPECT_EQ(j["id"], "q\"1");
  ASSERT_EQ(j["outputs"].size(), 4u);
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 3}));
  EXPECT_EQ(j["outputs"][0]["data"], json::array({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}));
  auto p = j["outputs"][1]["data"];
  EXPECT_NEAR(p[0].get<double>(), 0.09003057, 1e-7);
  EXPECT_NEAR(p[2].get<double>(), 0.66524096, 1e-7);
  EXPECT_NEAR(p[3].get<double>(), 1.0 / 3, 1e-7);
  EXPECT_EQ(j["outputs"][2]["name"], "class_ids");
  EXPECT_EQ(j["outputs"][2]["datatype"], "INT64");
  EXPECT_EQ(j["outputs"][2]["data"], json::array({2, 0}));
  EXPECT_EQ(j["outputs"][3]["data"], json::array({"c", "a"}));
  // Binary: one logit, its sigmoid, no class ids; outputs picked.
  float one[] = {0.0f, -2.0f};
  j = json::parse(encode_infer_response("m", "v", "", one, 2, sparse_model(), out_probabilities));
  EXPECT_FALSE(j.contains("id"));
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["shape"], json::array({2, 1}));
  EXPECT_NEAR(j["outputs"][0]["data"][1].get<double>(), 0.11920292, 1e-7);
  // Floats round-trip exactly.
  float odd[] = {0.1f, 1e-30f, 3.4028235e38f};
  auto s = sparse_model();
  j = json::parse(encode_infer_response("m", "v", "", odd, 3, s, out_logits));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["outputs"][0]["data"][i].get<float>(), odd[i]);
}

// The binary tensor data extension: the JSON header, then each binary input's bytes in the order of
// "inputs" (little-endian, row-major); a JSON input may sit beside a binary one.
std::string with_bytes(std::string head, const void* data, std::size_t n) {
  return head + std::string(static_cast<const char*>(data), n);
}

TEST(infer_codec, binary_tensors_read_as_their_json_twins) {
  const float dense[] = {1, 2.5f, -3, 0.4f, 0, 1};
  const std::string head =
      R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}]})";
  auto r = parse_infer_request(with_bytes(head, dense, sizeof dense), dense_model(), head.size());
  ASSERT_TRUE(r) << r.err().context();
  EXPECT_EQ(r->rows, 2u);
  EXPECT_EQ(r->dense, (std::vector<float>{1, 2.5f, -3, 0.4f, 0, 1}));
  // ids in binary after dense in JSON; the ids beyond 2^53 exact.
  const std::int64_t ids[] = {5, 9007199254740993};
  const std::string head2 =
      R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
                     {"name": "ids", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": 16}}]})";
  auto s = parse_infer_request(with_bytes(head2, ids, sizeof ids), sparse_model(), head2.size());
  ASSERT_TRUE(s) << s.err().context();
  EXPECT_EQ(s->ids, (std::vector<std::int64_t>{5, 9007199254740993}));
  EXPECT_EQ(s->dense, (std::vector<float>{1, 2}));
}

TEST(infer_codec, bad_binary_tensors_are_named) {
  const float three[] = {1, 2, 3};
  auto binary_bad = [](const std::string& head, const std::string& blob, std::size_t json_bytes = SIZE_MAX) {
    auto r =
        parse_infer_request(head + blob, dense_model(), json_bytes == SIZE_MAX ? head.size() : json_bytes);
    EXPECT_FALSE(r) << head;
    return r ? std::string() : r.err().context();
  };
  auto head = [](const std::string& size) {
    return R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "parameters": {"binary_data_size": )" +
           size + "}}]}";
  };
  const std::string twelve = with_bytes("", three, sizeof three);
  EXPECT_EQ(binary_bad(head("16"), twelve),
            "inputs[0] 'dense': binary_data_size 16 at byte 0 of the binary data, which has 12 bytes");
  EXPECT_EQ(binary_bad(head("8"), twelve),
            "the binary data after the JSON has 12 bytes; the inputs' binary_data_size add up to 8");
  EXPECT_EQ(binary_bad(head("8"), twelve.substr(0, 8)),
            "inputs[0] 'dense': parameters.binary_data_size 8 for shape [1, 3] (12 bytes of FP32 expected)");
  EXPECT_EQ(binary_bad(head("-4"), twelve),
            "inputs[0] 'dense'.parameters.binary_data_size: expected a non-negative integer, got -4");
  EXPECT_EQ(binary_bad(head("\"12\""), twelve),
            "inputs[0] 'dense'.parameters.binary_data_size: expected a non-negative integer, got a string");
  EXPECT_EQ(binary_bad(head("12"), twelve, 10000),
            "Inference-Header-Content-Length 10000: the body has only " +
                std::to_string(head("12").size() + 12) + " bytes");
  // Without the header the sizes mean nothing: refused, not read as JSON with no data.
  EXPECT_EQ(
      bad(head("12")),
      "inputs[0] 'dense': parameters.binary_data_size without the Inference-Header-Content-Length header "
      "(the JSON's length in bytes, the binary data after it)");
  const std::string both =
      R"({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3], "parameters": {"binary_data_size": 12}}]})";
  EXPECT_EQ(binary_bad(both, twelve), "inputs[0] 'dense': both data and parameters.binary_data_size");
  const float nan[] = {1, std::nanf(""), 3};
  EXPECT_EQ(binary_bad(head("12"), with_bytes("", nan, sizeof nan)),
            "inputs[0] 'dense': binary value 1 is not finite");
}

}  // namespace
}  // namespace troupe::serve
