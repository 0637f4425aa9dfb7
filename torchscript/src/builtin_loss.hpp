// The TorchScript backend's built-in losses with their gradient, in one pass over the logits on
// the host: what libtorch's binary_cross_entropy_with_logits (mean) and log_softmax + nll_loss
// (mean) compute, without their operators and autograd nodes (about a dozen per step, each paying
// libtorch's dispatch on tensors of a few hundred floats). The gradient d(loss)/d(logits) goes to
// logits.backward(); a module's own loss method still runs through libtorch.
//
// Values agree with libtorch's to float rounding (exp and log differ in the last bits), not bit for
// bit. No libtorch here.
#pragma once

#include <cstddef>
#include <string>

#include "troupe/core/error.hpp"

namespace troupe::actors {

// Mean logistic loss of logits[n] against labels[n] (0/1, or any target in [0, 1]);
// grad[i] = (sigmoid(logits[i]) - labels[i]) / n.
float logistic_loss(const float* logits, const float* labels, std::size_t n, float* grad);

// Mean softmax cross-entropy of logits[n x width] against class ids labels[n] (as floats);
// grad = (softmax - one_hot) / n. A label that is not a class id in [0, width) is an error naming
// it (libtorch's nll_loss would throw).
expected<float> softmax_cross_entropy(const float* logits, const float* labels, std::size_t n,
                                      std::size_t width, float* grad);

}  // namespace troupe::actors
