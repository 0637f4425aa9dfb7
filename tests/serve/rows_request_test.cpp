// The troupe_rows request (serve/src/rows_request.hpp) on an encoder of a CSV's columns: rows by
// name into the tensors /infer takes, every bad row named, and random bytes never crash it (the
// real route against troupe predict: tests/serve/serve_rows_test.py).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "../../serve/src/rows_request.hpp"
#include "mutate.hpp"

namespace troupe::serve {
namespace {

// a, b dense (b standardized: mean 10, std 2), c categorical (100 ids), y the label.
job::row_encoder encoder() {
  storage::row_format f;
  f.header = {"a", "b", "c", "y"};
  f.label = "y";
  f.dense = {"a", "b"};
  f.sparse = {"c"};
  f.missing = "zero";
  f.buckets_per_field = 100;
  f.class_names = {"no", "yes"};
  f.standardize = {{"b", 10.0, 2.0}};
  auto e = job::row_encoder::create(f);
  EXPECT_TRUE(e) << e.err().to_string();
  return std::move(*e);
}

model_shape shape() {
  model_shape s;
  s.takes_ids = true;
  s.dense_dim = 2;
  s.fields = 1;
  s.max_rows = 4;
  return s;
}

std::string refused(const std::string& body) {
  static const auto enc = encoder();
  auto r = parse_rows_request(body, shape(), &enc, "");
  return r ? "accepted" : r.err().context();
}

TEST(rows_request, rows_by_name_become_the_tensors_infer_takes) {
  const auto enc = encoder();
  auto r = parse_rows_request(
      R"({"id": "q", "rows": [{"c": "Paris", "b": 14, "a": "1.5", "y": "yes", "other": [1]},
                              {"a": 2, "b": null, "c": "Paris"}], "outputs": [{"name": "logits"}]})",
      shape(), &enc, "");
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->id, "q");
  EXPECT_EQ(r->rows, 2u);
  EXPECT_EQ(r->outputs, unsigned{out_logits});
  EXPECT_EQ(r->dense, (std::vector<float>{1.5f, 2.0f, 2.0f, -5.0f}));  // (14-10)/2; a missing b: (0-10)/2
  ASSERT_EQ(r->ids.size(), 2u);
  EXPECT_EQ(r->ids[0], r->ids[1]) << "the same text, the same id";
  EXPECT_GE(r->ids[0], 0);
  EXPECT_LT(r->ids[0], 100);
}

// A categorical cell given as a JSON number is the number's text as the request wrote it, as the CSV
// held it: 1e3 is the category "1e3" and 2.50 is "2.50" (they were json's own text, "1000.0" and
// "2.5": other categories, answered silently); an integer is its own text.
TEST(rows_request, a_number_in_a_categorical_column_is_its_text_as_written) {
  const auto enc = encoder();
  const auto id_of = [&](const std::string& cell) -> std::int64_t {
    auto r = parse_rows_request(R"({"rows": [{"a": 1, "b": 2, "c": )" + cell + "}]}", shape(), &enc, "");
    EXPECT_TRUE(r) << cell << ": " << r.err().to_string();
    return r && r->ids.size() == 1 ? r->ids[0] : -1;
  };
  EXPECT_EQ(id_of("1e3"), id_of(R"("1e3")"));
  EXPECT_NE(id_of("1e3"), id_of(R"("1000.0")"));
  EXPECT_EQ(id_of("2.50"), id_of(R"("2.50")"));
  EXPECT_NE(id_of("2.50"), id_of(R"("2.5")"));
  EXPECT_EQ(id_of("7"), id_of(R"("7")"));
  EXPECT_EQ(id_of("-0.0"), id_of(R"("-0.0")"));
  // A dense column reads the same value either way (the text parses to the same number).
  auto d = parse_rows_request(R"({"rows": [{"a": 1e3, "b": 2.50, "c": "x"}]})", shape(), &enc, "");
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->dense, (std::vector<float>{1000.0f, -3.75f}));
}

// A boolean has no one text in a CSV ("True" from pandas): refused, where it was read as "true".
TEST(rows_request, a_boolean_is_refused_naming_the_text_to_send) {
  const std::string why = refused(R"({"rows": [{"a": 1, "b": 2, "c": true}]})");
  EXPECT_NE(why.find("rows[0] 'c': a boolean; send the text the training CSV held for it"), std::string::npos)
      << why;
}

TEST(rows_request, every_bad_row_is_named) {
  EXPECT_NE(refused(R"({"rows": [{"a": 1, "c": "x"}]})").find("rows[0]: missing column 'b'"),
            std::string::npos);
  EXPECT_NE(
      refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}, {"a": "one", "b": 2, "c": "x"}]})").find("rows[1]"),
      std::string::npos);
  EXPECT_NE(refused(R"({"rows": [[1, 2, "x"]]})").find("rows[0]: expected an object"), std::string::npos);
  EXPECT_NE(refused(R"({"rows": [{"a": {"v": 1}, "b": 2, "c": "x"}]})").find("a number, a string or null"),
            std::string::npos);
  EXPECT_NE(refused(R"({"rows": []})").find("'rows': 0 rows; this server takes 1 to 4"), std::string::npos);
  EXPECT_NE(refused(R"({"rows": [{}, {}, {}, {}, {}]})").find("5 rows"), std::string::npos);
  EXPECT_NE(refused(R"({"row": []})").find("'rows' missing"), std::string::npos);
  EXPECT_NE(
      refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "outputs": [{"name": "x"}]})").find("outputs[0]"),
      std::string::npos);
  EXPECT_NE(refused("[1, 2]").find("not a JSON object"), std::string::npos);
  // As /infer: an output the model lacks is named with those it has (it was answered with no
  // outputs); a number beyond a double, or beyond FP32, says so (not "not a JSON object").
  EXPECT_NE(refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "outputs": [{"name": "class_names"}]})")
                .find("outputs[0].name 'class_names': this model's outputs are logits, probabilities"),
            std::string::npos);
  EXPECT_NE(refused(R"({"rows": [{"a": 1e400, "b": 2, "c": "x"}]})").find("malformed JSON: number overflow"),
            std::string::npos)
      << refused(R"({"rows": [{"a": 1e400, "b": 2, "c": "x"}]})");
  EXPECT_NE(refused(R"({"rows": [{"a": "1e39", "b": 2, "c": "x"}]})").find("'1e39' is beyond FP32's range"),
            std::string::npos)
      << refused(R"({"rows": [{"a": "1e39", "b": 2, "c": "x"}]})");
  EXPECT_NE(refused(R"({"rows": [{"a": "x1", "b": 2, "c": "x"}]})").find("'x1' is not a number"),
            std::string::npos);
  EXPECT_NE(refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "id": 5, )")
                .find("malformed JSON (byte 49): "),  // as /infer says it (it was the parser's own text)
            std::string::npos)
      << refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "id": 5, )");
  EXPECT_NE(refused(R"({"rows": {"a": 1, "b": 2, "c": "x"}})")
                .find("'rows': expected an array of objects, not object (one row goes in brackets"),
            std::string::npos)
      << "it said 'rows' missing";
  EXPECT_NE(refused(std::string(100000, '[')).find("nests deeper"), std::string::npos);
  // A key given twice, as /infer refuses it (the last was taken: {"a": 1, "a": 5} answered a = 5).
  EXPECT_EQ(refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}, {"a": 1, "a": 5, "b": 2, "c": "x"}]})"),
            "rows[1]: the key 'a' is given twice");
  EXPECT_EQ(refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "rows": [{"a": 5, "b": 2, "c": "x"}]})"),
            "the request: the key 'rows' is given twice");
  EXPECT_EQ(refused(R"({"id": "x", "rows": [{"a": 1, "b": 2, "c": "x"}], "outputs": [{"name": "logits",
                       "name": "logits"}]})"),
            "outputs[0]: the key 'name' is given twice");
  EXPECT_EQ(refused(R"({"rows": [{"a": 1, "b": 2, "c": "x"}], "x": {"a": 1}, "y": {"a": 2}})"), "accepted")
      << "one key in two objects is no duplicate";
  auto none = parse_rows_request(R"({"rows": [{"a": 1}]})", shape(), nullptr, "m/model.json has no columns");
  ASSERT_FALSE(none);
  EXPECT_NE(none.err().context().find("m/model.json has no columns"), std::string::npos);
}

TEST(rows_request, random_bytes_never_crash_the_parser) {
  const auto enc = encoder();
  std::mt19937 rng(12);
  const std::string base = R"({"id": "x", "rows": [{"a": 1.5, "b": "2", "c": "Zürich", "y": null}]})";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = base;
    mutate(rng, s, "[]{}\",:0-e.n");
    auto r = parse_rows_request(s, shape(), &enc, "");
    if (r) {
      ++accepted;
      EXPECT_EQ(r->dense.size(), r->rows * 2);
      EXPECT_EQ(r->ids.size(), r->rows);
    } else {
      EXPECT_FALSE(r.err().context().empty());
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace troupe::serve
