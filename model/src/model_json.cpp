#include "model_json.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/clock.hpp"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "0.1.0"
#endif

namespace troupe::model {

namespace {

// The columns of a raw row, as the store's CSV import read them (absent for other stores).
nlohmann::json columns(const storage::row_format& f) {
  nlohmann::json scale = nlohmann::json::object();
  for (const auto& s : f.standardize) scale[s.column] = {{"mean", s.mean}, {"std", s.std}};
  nlohmann::json out = {{"header", f.header},
                        {"label", f.label},
                        {"dense", f.dense},
                        {"sparse", f.sparse},
                        {"delimiter", std::string(1, f.delimiter)},
                        {"hash", f.hash},
                        {"missing", f.missing},
                        {"standardize", scale}};
  if (!f.fill.empty()) {
    nlohmann::json fill = nlohmann::json::object();
    for (std::size_t k = 0; k < f.fill.size() && k < f.dense.size(); ++k) fill[f.dense[k]] = f.fill[k];
    out["fill"] = fill;
  }
  return out;
}

// result.json of the job, or an empty object (a running job has none yet).
nlohmann::json result_of(const std::string& job_dir) {
  std::ifstream in(job_dir + "/result.json");
  auto r = nlohmann::json::parse(in, nullptr, false);
  return r.is_object() ? r : nlohmann::json::object();
}

nlohmann::json metrics(const std::string& job_dir) {
  auto r = result_of(job_dir);
  nlohmann::json m = nlohmann::json::object();
  if (!r.is_object()) return m;
  for (const char* k : {"test_loss", "test_accuracy", "test_auc", "test_rows", "train_loss"})
    if (r.contains(k)) m[k] = r[k];
  return m;
}

// How a raw example of the training store's source becomes the module's inputs: the manifest's
// source always; the rule for the built-in datasets' raw files (a CSV store's is `columns`).
nlohmann::json input_of(const storage::manifest& train) {
  nlohmann::json in = {{"source", train.source}};
  const std::string kind = train.source.substr(0, train.source.find(':'));
  if (kind == "fashion-mnist") {
    in["dense"] = "the image's bytes as its idx3 file stores them (row-major), each times dense_scale";
    // The reader's float(1/255): a float32 byte times this float32 gives the store's value exactly.
    in["dense_scale"] = static_cast<double>(1.0f / 255.0f);
  } else if (kind == "criteo") {
    in["dense"] =
        "the 13 integer columns, each x -> log(1 + x) for x > 0 (in double, stored as float32), else x (an "
        "empty column is 0)";
    in["ids"] =
        "the 26 categorical columns: column f's cell -> category_id(cell, f, buckets_per_field) "
        "(docs/model_format.md, Sparse ids from raw values)";
  }
  return in;
}

}  // namespace

std::string model_json(const model_json_input& in) {
  const auto& s = in.train.schema;
  const bool binary = s.num_classes <= 2;
  const std::size_t classes = binary ? 2 : s.num_classes;
  nlohmann::json j;
  j["format"] = "troupe-model";
  j["format_version"] = 1;
  j["troupe_version"] = TROUPE_VERSION;
  j["model"] = in.spec.nn.model.type;
  j["forward"] = s.sparse_fields > 0 ? nlohmann::json{"dense", "ids"} : nlohmann::json{"dense"};
  j["dense_dim"] = s.dense_dim;
  j["fields"] = s.sparse_fields;
  j["buckets_per_field"] = s.buckets_per_field;
  if (!s.image_shape.empty()) j["image_shape"] = s.image_shape;
  j["output"] = {
      {"kind", binary ? "binary" : "multiclass"}, {"classes", classes}, {"logits", binary ? 1 : classes}};
  j["input"] = input_of(in.train);
  if (in.train.columns) {
    j["columns"] = columns(*in.train.columns);
    if (!in.train.columns->class_names.empty()) j["class_names"] = in.train.columns->class_names;
  }
  const auto& m = in.report.meta;
  j["job"] = {{"id", std::filesystem::path(in.job_dir).filename().string()},
              {"strategy", result_of(in.job_dir).value("strategy", in.spec.job.strategy)},
              {"epochs", in.spec.nn.train.epochs},
              {"step", m.step},
              {"from", m.from},
              {"state", in.report.state_dir}};
  if (m.data_epoch) j["job"]["data_epoch"] = *m.data_epoch;
  j["metrics"] = metrics(in.job_dir);
  j["embedding"] = {{"rows", in.report.embedding_rows}, {"unseen_id", "zero row"}};
  if (in.report.verified_rows > 0)
    j["verified"] = {{"rows", in.report.verified_rows}, {"max_abs_logit_diff", in.report.max_abs_diff}};
  j["created_unix_ms"] = clock::system().wall_ms();
  return j.dump(2) + "\n";
}

expected<void> write_model_json(const std::string& dir, const model_json_input& in) {
  return cluster::write_file_atomic(dir + "/model.json", model_json(in));
}

}  // namespace troupe::model
