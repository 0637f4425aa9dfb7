// Evaluation metrics over a whole evaluation set (not averaged per batch).
#pragma once

#include <cstddef>
#include <span>

namespace troupe::nn {

// Fraction of rows whose argmax over `classes` scores equals the label. scores: [n x classes].
double accuracy(std::span<const float> scores, std::size_t classes, std::span<const float> labels);

// Mean binary log loss of probabilities p against 0/1 labels; p clipped to [1e-7, 1-1e-7].
double log_loss(std::span<const float> probabilities, std::span<const float> labels);

// Exact ROC AUC (ties get half credit) by sorting all n scores: O(n log n). 0.5 when one class
// is absent. Scores may be probabilities or logits (only the order matters).
double auc(std::span<const float> scores, std::span<const float> labels);

}  // namespace troupe::nn
