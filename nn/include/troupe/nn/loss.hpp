// Losses on the model's logits. Both return the MEAN loss over the batch; the gradient is that
// of the mean.
#pragma once

#include <span>

#include "troupe/nn/tensor.hpp"

namespace troupe::nn {

enum class loss_kind {
  softmax_cross_entropy,  // logits [n, classes], labels are class indices
  sigmoid_bce,            // logits [n, 1], labels 0/1 (BCE with logits, numerically stable)
};

// Writes the probabilities (softmax rows, or sigmoids) into probs and returns the mean loss.
float loss_forward(loss_kind kind, const tensor& logits, std::span<const float> labels, tensor& probs);
// The gradient of the mean loss w.r.t. the logits, from the probabilities of loss_forward.
void loss_backward(loss_kind kind, const tensor& probs, std::span<const float> labels, tensor& grad_logits);
// Probabilities only (prediction, no labels).
void loss_probabilities(loss_kind kind, const tensor& logits, tensor& probs);

}  // namespace troupe::nn
