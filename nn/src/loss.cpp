#include "troupe/nn/loss.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::nn {

void loss_probabilities(loss_kind kind, const tensor& logits, tensor& probs) {
  probs.resize(logits.dims());
  const std::size_t n = logits.dim(0), c = logits.row_size();
  if (kind == loss_kind::sigmoid_bce) {
    for (std::size_t i = 0; i < logits.size(); ++i) probs[i] = 1.0f / (1.0f + std::exp(-logits[i]));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float* z = logits.data() + i * c;
    float* p = probs.data() + i * c;
    const float m = *std::max_element(z, z + c);
    float s = 0;
    for (std::size_t j = 0; j < c; ++j) s += p[j] = std::exp(z[j] - m);
    const float inv = 1.0f / s;
    for (std::size_t j = 0; j < c; ++j) p[j] *= inv;
  }
}

float loss_forward(loss_kind kind, const tensor& logits, std::span<const float> labels, tensor& probs) {
  loss_probabilities(kind, logits, probs);
  const std::size_t n = logits.dim(0), c = logits.row_size();
  double sum = 0;
  if (kind == loss_kind::sigmoid_bce) {
    for (std::size_t i = 0; i < n; ++i) {
      const double z = logits[i], y = labels[i];
      sum += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float* z = logits.data() + i * c;
      const double m = *std::max_element(z, z + c);
      double s = 0;
      for (std::size_t j = 0; j < c; ++j) s += std::exp(z[j] - m);
      sum += m + std::log(s) - z[static_cast<std::size_t>(labels[i])];
    }
  }
  return static_cast<float>(sum / static_cast<double>(n));
}

void loss_backward(loss_kind kind, const tensor& probs, std::span<const float> labels, tensor& grad) {
  grad.resize(probs.dims());
  const std::size_t n = probs.dim(0), c = probs.row_size();
  const float inv_n = 1.0f / static_cast<float>(n);
  if (kind == loss_kind::sigmoid_bce) {
    for (std::size_t i = 0; i < n; ++i) grad[i] = (probs[i] - labels[i]) * inv_n;
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < c; ++j) grad[i * c + j] = probs[i * c + j] * inv_n;
    grad[i * c + static_cast<std::size_t>(labels[i])] -= inv_n;
  }
}

}  // namespace troupe::nn
