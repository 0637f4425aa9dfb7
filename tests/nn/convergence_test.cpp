// Fast convergence checks (default suite); the full criteria are in convergence_slow_test.cpp.
#include "convergence.hpp"

namespace troupe::nn {
namespace {

TEST(convergence, mlp_fashion_mnist_two_epochs) {
  if (!testing::have_fashion_mnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << fashion_mnist_default_dir;
  auto r = testing::run_example("fashion_mnist_mlp.toml", {"train.epochs=2"});
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_GE(r.epochs.back().accuracy, 0.85);
}

// The done-criterion for DeepFM runs in the default suite: it takes seconds.
TEST(convergence, deepfm_synthetic_within_0_01_auc_of_the_planted_model) {
  auto r = testing::run_example("deepfm_synthetic.toml", {});
  ASSERT_FALSE(r.epochs.empty());
  EXPECT_GT(r.true_auc, 0.8);
  EXPECT_GE(r.epochs.back().auc, r.true_auc - 0.01);
}

TEST(convergence, lr_and_wide_deep_learn_synthetic_ctr) {
  for (std::string type : {"lr", "wide_deep"}) {
    auto r = testing::run_example("deepfm_synthetic.toml",
                                  {"model.type=" + type, "data.rows=200000", "train.epochs=2"});
    ASSERT_FALSE(r.epochs.empty());
    EXPECT_GE(r.epochs.back().auc, 0.75) << type;
  }
}

}  // namespace
}  // namespace troupe::nn
