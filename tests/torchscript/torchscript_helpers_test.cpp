// The TorchScript backend's helpers that need no libtorch: the built-in losses with their gradients
// (against the formulas in double precision and a finite difference). The batch's embedding rows
// (nn::sparse_batch) are tested in tests/nn/sparse_batch_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "builtin_loss.hpp"

namespace troupe::actors {
namespace {

// d(loss)/d(logit k) by central differences in double precision.
template <class Loss>
double numeric_grad(Loss loss, std::vector<double> x, std::size_t k) {
  const double h = 1e-6;
  x[k] += h;
  const double up = loss(x);
  x[k] -= 2 * h;
  return (up - loss(x)) / (2 * h);
}

TEST(torchscript_builtin_loss, logistic_loss_and_its_gradient) {
  std::vector<float> logits{-30.0f, -2.5f, -0.1f, 0.0f, 0.7f, 3.0f, 40.0f}, labels{0, 1, 1, 0, 1, 0, 1};
  const std::size_t n = logits.size();
  auto exact = [&](const std::vector<double>& x) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i)
      s += std::max(x[i], 0.0) - x[i] * labels[i] + std::log1p(std::exp(-std::fabs(x[i])));
    return s / static_cast<double>(n);
  };
  std::vector<double> x(logits.begin(), logits.end());
  std::vector<float> grad(n);
  EXPECT_NEAR(logistic_loss(logits.data(), labels.data(), n, grad.data()), exact(x), 1e-6);
  for (std::size_t k = 0; k < n; ++k) {
    const double sigmoid = 1.0 / (1.0 + std::exp(-x[k]));
    EXPECT_NEAR(grad[k], (sigmoid - labels[k]) / static_cast<double>(n), 1e-7) << k;
    EXPECT_NEAR(grad[k], numeric_grad(exact, x, k), 1e-6) << k;
  }
}

TEST(torchscript_builtin_loss, softmax_cross_entropy_and_its_gradient) {
  const std::size_t n = 3, width = 4;
  std::vector<float> logits{1.0f, -2.0f, 0.5f, 3.0f, 80.0f, 79.0f, -5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> labels{3, 1, 2};
  auto exact = [&](const std::vector<double>& x) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double top = x[i * width], total = 0;
      for (std::size_t c = 1; c < width; ++c) top = std::max(top, x[i * width + c]);
      for (std::size_t c = 0; c < width; ++c) total += std::exp(x[i * width + c] - top);
      s += std::log(total) + top - x[i * width + static_cast<std::size_t>(labels[i])];
    }
    return s / static_cast<double>(n);
  };
  std::vector<double> x(logits.begin(), logits.end());
  std::vector<float> grad(n * width);
  auto loss = softmax_cross_entropy(logits.data(), labels.data(), n, width, grad.data());
  ASSERT_TRUE(loss);
  EXPECT_NEAR(*loss, exact(x), 1e-6);
  for (std::size_t k = 0; k < n * width; ++k) EXPECT_NEAR(grad[k], numeric_grad(exact, x, k), 1e-6) << k;
  // Each row's gradient sums to zero (softmax minus a one-hot, over n).
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::size_t c = 0; c < width; ++c) s += grad[i * width + c];
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
}

TEST(torchscript_builtin_loss, a_label_that_is_no_class_is_an_error) {
  std::vector<float> logits(6, 0.0f), grad(6);
  for (float bad : {3.0f, -1.0f, 1.5f, NAN}) {
    std::vector<float> labels{0, bad};
    auto loss = softmax_cross_entropy(logits.data(), labels.data(), 2, 3, grad.data());
    ASSERT_FALSE(loss) << bad;
    EXPECT_NE(loss.err().to_string().find("of row 1 is not a class id in [0, 3)"), std::string::npos)
        << loss.err().to_string();
  }
}

}  // namespace
}  // namespace troupe::actors
