// Runs an example job file (with overrides) through the same nn code path as
// `troupe train --local` and returns the per-epoch test metrics.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "troupe/nn/config.hpp"

namespace troupe::nn::testing {

struct run_result {
  std::vector<eval_result> epochs;
  double true_auc = 0;
  double seconds = 0;
  double best_accuracy() const {
    double b = 0;
    for (auto& e : epochs) b = std::max(b, e.accuracy);
    return b;
  }
};

inline bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(fashion_mnist_default_dir) + "/train-images-idx3-ubyte.gz");
}

inline run_result run_example(const std::string& example, const std::vector<std::string>& overrides) {
  run_result out;
  auto doc = config_doc::from_file(std::string(TROUPE_SOURCE_DIR) + "/examples/" + example);
  EXPECT_TRUE(doc) << doc.err().to_string();
  if (!doc) return out;
  for (const auto& o : overrides) EXPECT_TRUE(doc->apply_override(o));
  auto job = load_job_config(*doc);
  EXPECT_TRUE(job) << job.err().to_string();
  if (!job) return out;
  auto data = load_data(job->data);
  EXPECT_TRUE(data) << data.err().to_string();
  if (!data) return out;
  auto m = model_registry::instance().create(job->model, data->train.info);
  EXPECT_TRUE(m) << m.err().to_string();
  if (!m) return out;
  auto t = trainer::create(**m, job->train);
  EXPECT_TRUE(t);
  out.true_auc = data->true_auc;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t e = 0; e < job->train.epochs; ++e) {
    EXPECT_TRUE((*t)->train_epoch(data->train));
    auto ev = (*t)->evaluate(data->test);
    EXPECT_TRUE(ev);
    if (!ev) return out;
    out.epochs.push_back(*ev);
    std::printf("%s epoch %zu: test loss %.4f accuracy %.4f auc %.4f (true auc %.4f)\n", example.c_str(),
                e + 1, ev->loss, ev->accuracy, ev->auc, out.true_auc);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %.1f s\n", example.c_str(), out.seconds);
  return out;
}

}  // namespace troupe::nn::testing
