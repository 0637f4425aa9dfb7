// The done-criteria on Fashion-MNIST (minutes on one core: LABELS slow).
#include "convergence.hpp"

namespace troupe::nn {
namespace {

TEST(convergence_slow, mlp_784_256_128_10_reaches_0_88_in_10_epochs) {
  if (!testing::have_fashion_mnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << fashion_mnist_default_dir;
  auto r = testing::run_example("fashion_mnist_mlp.toml", {"train.epochs=10"});
  ASSERT_EQ(r.epochs.size(), 10u);
  EXPECT_GE(r.epochs.back().accuracy, 0.88);
}

TEST(convergence_slow, cnn_reaches_0_90) {
  if (!testing::have_fashion_mnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << fashion_mnist_default_dir;
  auto r = testing::run_example("fashion_mnist_cnn.toml", {});
  ASSERT_FALSE(r.epochs.empty());
  EXPECT_LE(r.epochs.size(), 10u);
  EXPECT_GE(r.epochs.back().accuracy, 0.90);
}

}  // namespace
}  // namespace troupe::nn
