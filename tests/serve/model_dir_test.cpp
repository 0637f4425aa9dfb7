// model/model_dir.hpp: model.json read and checked, each refusal naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "troupe/model/model_dir.hpp"

namespace troupe::model {
namespace {

namespace fs = std::filesystem;

const char* good = R"({
  "format": "troupe-model", "format_version": 1, "troupe_version": "0.1.0",
  "model": "deepfm", "forward": ["dense", "ids"],
  "dense_dim": 4, "fields": 3, "buckets_per_field": 1000,
  "output": {"kind": "binary", "classes": 2, "logits": 1},
  "columns": {"label": "y", "dense": ["a", "b", "c", "d"], "sparse": ["x", "y2", "z"], "delimiter": ";",
              "hash": "troupe-category-v1", "missing": "skip-row",
              "standardize": {"b": {"mean": 2.5, "std": 0.5}}},
  "job": {"id": "fm-7", "strategy": "async_ps", "epochs": 3, "step": 2820, "from": "final"},
  "metrics": {"test_loss": 0.41, "test_accuracy": 0.85, "test_auc": null},
  "created_unix_ms": 1795000000000,
  "some_future_key": {"ignored": true}
})";

std::string with(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string refusal(const std::string& text) {
  auto m = parse_model_json(text, "jobs/7/model");
  EXPECT_FALSE(m);
  return m ? "" : m.err().context();
}

TEST(model_dir, reads_every_field_of_the_format) {
  auto m = parse_model_json(good, "jobs/fm-7/model");
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->model, "deepfm");
  EXPECT_TRUE(m->takes_ids);
  EXPECT_EQ(m->dense_dim, 4u);
  EXPECT_EQ(m->fields, 3u);
  EXPECT_EQ(m->buckets_per_field, 1000u);
  EXPECT_EQ(m->kind, output_kind::binary);
  EXPECT_EQ(m->logits, 1u);
  ASSERT_TRUE(m->columns);
  EXPECT_EQ(m->columns->delimiter, ";");
  EXPECT_EQ(m->columns->missing, "skip-row");
  EXPECT_EQ(m->columns->sparse.size(), 3u);
  EXPECT_DOUBLE_EQ(m->columns->standardize.at("b").mean, 2.5);
  EXPECT_EQ(m->job.id, "fm-7");
  EXPECT_EQ(m->job.step, 2820);
  EXPECT_EQ(m->created_unix_ms, 1795000000000);
  EXPECT_EQ(m->version(), "fm-7@1795000000000");
  EXPECT_EQ(m->pt_path, "jobs/fm-7/model/model.pt");
}

TEST(model_dir, each_refusal_names_the_file_and_the_problem) {
  // Where the text stops being JSON, and why.
  EXPECT_EQ(refusal("{"),
            "jobs/7/model/model.json: not JSON: parse error at line 1, column 2: syntax error while parsing "
            "object key - unexpected end of input; expected string literal");
  EXPECT_NE(refusal("{\"a\": 1,\n  \"b\": NaN}").find("not JSON: parse error at line 2, column 8"),
            std::string::npos)
      << refusal("{\"a\": 1,\n  \"b\": NaN}");
  EXPECT_EQ(refusal("[1]"), "jobs/7/model/model.json: expected a JSON object");
  EXPECT_EQ(refusal(with(good, R"("format": "troupe-model")", R"("format": "onnx")")),
            "jobs/7/model/model.json: format: \"onnx\", expected \"troupe-model\"");
  EXPECT_EQ(
      refusal(with(good, R"("format_version": 1)", R"("format_version": 2)")),
      "jobs/7/model/model.json: format_version 2: this troupe reads format_version 1 (a newer troupe wrote "
      "it)");
  EXPECT_EQ(refusal(with(good, R"(["dense", "ids"])", R"(["ids"])")),
            "jobs/7/model/model.json: forward: expected [\"dense\"] or [\"dense\", \"ids\"], got [\"ids\"]");
  EXPECT_EQ(refusal(with(good, R"("dense_dim": 4)", R"("dense_dim": "4")")),
            "jobs/7/model/model.json: dense_dim: expected an integer, got \"4\"");
  EXPECT_EQ(refusal(with(good, R"("fields": 3)", R"("fields": 0)")),
            "jobs/7/model/model.json: fields: 0, but forward takes ids (a model with sparse fields has "
            "fields >= 1)");
  EXPECT_EQ(refusal(with(good, R"("logits": 1})", R"("logits": 2})")),
            "jobs/7/model/model.json: output.logits is 2, but a binary model has 1");
  EXPECT_EQ(
      refusal(with(good, R"("kind": "binary")", R"("kind": "regression")")),
      "jobs/7/model/model.json: output.kind: expected \"binary\" or \"multiclass\", got \"regression\"");
  EXPECT_EQ(refusal(with(good, R"("kind": "binary", "classes": 2, "logits": 1)",
                         R"("kind": "multiclass", "classes": 10, "logits": 3)")),
            "jobs/7/model/model.json: output.logits is 3, but a multiclass model of 10 classes has 10");
  EXPECT_EQ(refusal(with(good, R"("dense": ["a", "b", "c", "d"])", R"("dense": ["a"])")),
            "jobs/7/model/model.json: columns.dense names 1 columns, but dense_dim is 4");
  EXPECT_EQ(refusal(with(good, R"("output": {"kind": "binary", "classes": 2, "logits": 1},)", "")),
            "jobs/7/model/model.json: output: missing");
}

// --missing mean: each dense column's fill value, by name; one missing, or not a number, is refused.
TEST(model_dir, a_mean_filled_model_has_a_fill_value_for_every_dense_column) {
  const std::string mean = with(good, R"("missing": "skip-row",)",
                                R"("missing": "mean", "fill": {"a": 1, "b": 2.5, "c": -3, "d": 0.125},)");
  auto m = parse_model_json(mean, "jobs/fm-7/model");
  ASSERT_TRUE(m) << m.err().to_string();
  auto f = row_format_of(*m);
  ASSERT_TRUE(f) << f.err().to_string();
  EXPECT_EQ(f->missing, "mean");
  EXPECT_EQ(f->fill, (std::vector<double>{1, 2.5, -3, 0.125})) << "in dense order";
  EXPECT_EQ(refusal(with(mean, R"("d": 0.125)", R"("e": 0.125)")),
            "jobs/7/model/model.json: columns.fill: no value for dense column 'd' (missing is mean)");
  EXPECT_EQ(refusal(with(mean, R"("d": 0.125)", R"("d": "x")")),
            "jobs/7/model/model.json: columns.fill.d: expected a number");
  EXPECT_EQ(
      refusal(with(good, R"("missing": "skip-row")", R"("missing": "median")")),
      "jobs/7/model/model.json: columns.missing: expected error, zero, mean or skip-row, got \"median\"");
}

TEST(model_dir, a_directory_needs_both_files) {
  auto dir = fs::temp_directory_path() / ("model_dir_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto m = read_model_dir(dir.string());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.err().context(),
            (dir / "model.pt").string() +
                ": No such file or directory (a model directory holds model.pt and model.json)");
  // A job's directory given for its model: the error says where its model is, or that the job has
  // written none yet (a running job: `troupe export` writes one now), as does its model/ itself.
  std::ofstream(dir / "job.toml") << "[job]\n";
  m = read_model_dir(dir.string());
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().context().find("has written no model yet"), std::string::npos) << m.err().context();
  EXPECT_NE(m.err().context().find("`troupe export " + dir.string() + "` writes one"), std::string::npos)
      << m.err().context();
  m = read_model_dir((dir / "model").string());
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().context().find("job " + dir.string() + " has written no model yet"), std::string::npos)
      << m.err().context();
  fs::create_directories(dir / "model");
  m = read_model_dir(dir.string());
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().context().find(" is a job directory: its model is " + (dir / "model").string()),
            std::string::npos)
      << m.err().context();
  fs::remove(dir / "model");
  fs::remove(dir / "job.toml");
  std::ofstream(dir / "model.pt") << "x";
  m = read_model_dir(dir.string());
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().context().find("model.json: No such file"), std::string::npos) << m.err().context();
  std::ofstream(dir / "model.json") << good;
  m = read_model_dir(dir.string());
  EXPECT_TRUE(m) << m.err().to_string();
  EXPECT_FALSE(read_model_dir((dir / "model.pt").string()));
  fs::remove_all(dir);
}

TEST(model_dir, versions_without_a_job_id_take_the_directory_name) {
  auto text = with(good, R"("job": {"id": "fm-7", )", R"("job": {)");
  auto m = parse_model_json(text, "jobs/abc/model");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->version(), "abc@1795000000000");
  m = parse_model_json(text, "exports/copy-3/");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->version(), "copy-3@1795000000000");
}

TEST(model_dir, incompatibility_names_what_differs) {
  auto a = *parse_model_json(good, "a");
  auto b = a;
  EXPECT_EQ(incompatibility(a, b), "");
  b.created_unix_ms += 1;
  b.job.id = "other";
  EXPECT_EQ(incompatibility(a, b), "");
  b.dense_dim = 5;
  EXPECT_EQ(incompatibility(a, b),
            "the served model takes 4 dense values a row, the new one takes 5 dense values a row");
  b = a;
  b.takes_ids = false;
  EXPECT_EQ(incompatibility(a, b),
            "the served model takes dense values and sparse ids, the new one takes dense values only");
  // Another id space (troupe data import csv --buckets): clients' ids would read other rows.
  b = a;
  b.buckets_per_field = a.buckets_per_field + 1000;
  EXPECT_EQ(incompatibility(a, b), "the served model reads ids of " + std::to_string(a.buckets_per_field) +
                                       " buckets a field, the new one reads ids of " +
                                       std::to_string(b.buckets_per_field) + " buckets a field");
  // A model of ids alone (deepfm) is said to take sparse ids only (it said "dense values and ids").
  a.dense_dim = 0;
  b = a;
  b.takes_ids = false;
  EXPECT_EQ(incompatibility(a, b),
            "the served model takes sparse ids only, the new one takes dense values only");
  a.dense_dim = 4;
  b = a;
  b.kind = output_kind::multiclass;
  EXPECT_EQ(incompatibility(a, b), "the served model is binary, the new one is multiclass");
  // Class ids naming other classes (a day's import numbered them anew).
  a.class_names = {"bird", "cat", "dog"};
  b = a;
  b.class_names = {"cat", "cow", "dog"};
  EXPECT_EQ(incompatibility(a, b),
            "the served model names classes (bird, cat, dog), the new one names classes (cat, cow, dog)");
  b.class_names.clear();
  EXPECT_EQ(incompatibility(a, b), "the served model names classes (bird, cat, dog), the new one names none");
  // Raw rows: every column the new model reads must be one the clients send; encodings may change.
  a.class_names.clear();
  a.columns = model_columns{};
  a.columns->dense = {"Age", "Income"};
  a.columns->sparse = {"City"};
  b = a;
  b.columns->standardize["Age"] = {40, 12};
  b.columns->dense = {"Age"};
  EXPECT_EQ(incompatibility(a, b), "") << "a column fewer, another standardization: the same rows serve";
  b.columns->dense = {"age", "Income"};
  EXPECT_EQ(incompatibility(a, b),
            "the new one reads the column 'age', which the served model's raw rows do not have (Age, City, "
            "Income)");
  b.columns.reset();
  EXPECT_EQ(
      incompatibility(a, b),
      "the served model takes raw rows (/rows: its data came from troupe data import csv), the new one does "
      "not");
}

}  // namespace
}  // namespace troupe::model
