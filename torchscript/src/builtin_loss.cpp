#include "builtin_loss.hpp"

#include <cmath>
#include <cstdio>

#include "troupe/nn/errc.hpp"

namespace troupe::actors {

namespace {

std::string label_text(float label) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(label));
  return buf;
}

}  // namespace

float logistic_loss(const float* logits, const float* labels, std::size_t n, float* grad) {
  double sum = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = logits[i], y = labels[i];
    // max(x, 0) - x*y + log(1 + exp(-|x|)): no overflow for any x.
    const float e = std::exp(-std::fabs(x));
    sum += static_cast<double>(std::fmax(x, 0.0f) - x * y + std::log1p(e));
    const float sigmoid = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    grad[i] = (sigmoid - y) * inv_n;
  }
  return static_cast<float>(sum / static_cast<double>(n));
}

expected<float> softmax_cross_entropy(const float* logits, const float* labels, std::size_t n,
                                      std::size_t width, float* grad) {
  double sum = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float label = labels[i];
    if (!(label >= 0 && label < static_cast<float>(width)) || label != std::floor(label))
      return make_unexpected(nn::nn_errc::bad_shape, "label " + label_text(label) + " of row " +
                                                         std::to_string(i) + " is not a class id in [0, " +
                                                         std::to_string(width) + ")");
    const float* x = logits + i * width;
    float* g = grad + i * width;
    float top = x[0];
    for (std::size_t c = 1; c < width; ++c) top = std::fmax(top, x[c]);
    float total = 0;
    for (std::size_t c = 0; c < width; ++c) {
      g[c] = std::exp(x[c] - top);
      total += g[c];
    }
    const auto y = static_cast<std::size_t>(label);
    sum += static_cast<double>(std::log(total) - (x[y] - top));
    const float scale = inv_n / total;
    for (std::size_t c = 0; c < width; ++c) g[c] *= scale;
    g[y] -= inv_n;
  }
  return static_cast<float>(sum / static_cast<double>(n));
}

}  // namespace troupe::actors
