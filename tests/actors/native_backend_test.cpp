// The native trainer backend's contract (trainer_backend.hpp): the model's tensors alias the flat
// parameter and gradient buffers, so what a strategy writes into parameters() is what the next
// forward reads, and compute_gradients leaves the batch's gradients in gradients(); a step through
// the backend is a step of nn::trainer.
#include <gtest/gtest.h>

#include <random>

#include "worker/backends/native_backend.hpp"

namespace troupe::actors {
namespace {

nn::dataset blobs() {
  nn::dataset d;
  d.info = {"blobs", 4, 0, 3, {}, 0};
  d.rows = 96;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (std::size_t i = 0; i < d.rows; ++i) {
    auto c = static_cast<float>(i % 3);
    for (int k = 0; k < 4; ++k) d.dense.push_back(n(rng) + (k == static_cast<int>(c) ? 2.0f : 0.0f));
    d.labels.push_back(c);
  }
  return d;
}

std::unique_ptr<nn::model> mlp(const nn::dataset& d) {
  nn::model_config mc;
  mc.type = "mlp";
  mc.hidden = {8};
  auto m = nn::model_registry::instance().create(mc, d.info);
  EXPECT_TRUE(m) << m.err().to_string();
  return std::move(*m);
}

TEST(native_backend, the_model_reads_and_writes_the_flat_buffers) {
  auto d = blobs();
  nn::train_config tc;
  auto be = native_backend::create(mlp(d), tc);
  ASSERT_TRUE(be) << be.err().to_string();
  auto& b = **be;
  std::size_t total = 0;
  for (const auto& s : b.layout()) {
    EXPECT_EQ(s.offset, total) << s.name;
    total += s.size;
  }
  ASSERT_EQ(b.parameters().size(), total);
  ASSERT_EQ(b.gradients().size(), total);
  auto params = b.model().parameters();
  ASSERT_EQ(params.size(), b.layout().size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->value.data(), b.parameters().data() + b.layout()[i].offset) << params[i]->name;
    EXPECT_EQ(params[i]->grad.data(), b.gradients().data() + b.layout()[i].offset) << params[i]->name;
  }
  // Gradients land in the flat buffer.
  nn::batch batch(d, 0, 32);
  ASSERT_TRUE(b.compute_gradients(batch));
  float norm = 0;
  for (float g : b.gradients()) norm += g * g;
  EXPECT_GT(norm, 0.0f);
  // Parameters written into the flat buffer are what the model predicts with: all zero weights
  // give uniform probabilities.
  std::fill(b.parameters().begin(), b.parameters().end(), 0.0f);
  ASSERT_TRUE(b.predict(batch));
  ASSERT_EQ(b.output_width(), 3u);
  for (float p : b.probabilities().first(32 * 3)) EXPECT_NEAR(p, 1.0f / 3, 1e-6f);
}

TEST(native_backend, steps_as_the_trainer_does) {
  auto d = blobs();
  nn::train_config tc;
  tc.optimizer.type = "adam";
  tc.optimizer.learning_rate = 0.05;
  auto be = native_backend::create(mlp(d), tc);
  ASSERT_TRUE(be);
  auto ref_model = mlp(d);
  auto ref = nn::trainer::create(*ref_model, tc);
  ASSERT_TRUE(ref);
  for (std::size_t s = 0; s < 6; ++s) {
    nn::batch batch(d, (s * 16) % 80, 16);
    auto a = (*be)->step(batch);
    auto r = (*ref)->step(batch);
    ASSERT_TRUE(a && r);
    EXPECT_FLOAT_EQ(*a, *r);
  }
  std::vector<float> want;
  for (auto* p : ref_model->parameters()) want.insert(want.end(), p->value.begin(), p->value.end());
  auto got = (*be)->parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;
  (*be)->reserve_optimizer_state();
  EXPECT_EQ((*be)->optimizer_state()[0].values.size(), 2 * (*be)->layout()[0].size);  // Adam: m, v
}

}  // namespace
}  // namespace troupe::actors
