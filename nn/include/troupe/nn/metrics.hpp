// Evaluation metrics over a whole evaluation set (not averaged per batch).
#pragma once

#include <cstddef>
#include <span>

namespace troupe::nn {

struct eval_result {
  std::size_t rows = 0;
  double loss = 0;
  double accuracy = 0;  // multi-class, and binary at threshold 0.5
  // Binary only (0 otherwise); NaN when the rows hold one class only (no AUC is defined then).
  double auc = 0;
};

// Whether a row's `width` scores are a prediction: every one finite (a row far outside what the
// model was trained on, or a model whose weights are not, gives NaN or an infinity).
bool scored(const float* row, std::size_t width);

// The metrics of a whole evaluation set: `scores` holds a row's probability of the positive class
// (width 1: a binary model) or one probability per class (width = classes); `loss_sum` is the sum
// of the batches' mean losses, each times its rows. A row whose scores are not all finite is no
// prediction: it counts as wrong (a NaN read as class 0 in a binary model's accuracy).
eval_result score_predictions(std::span<const float> scores, std::size_t width, std::span<const float> labels,
                              double loss_sum);

// Fraction of rows whose argmax over `classes` scores equals the label (a row with a score that is
// not finite never does). scores: [n x classes].
double accuracy(std::span<const float> scores, std::size_t classes, std::span<const float> labels);

// Mean binary log loss of probabilities p against 0/1 labels; p clipped to [1e-7, 1-1e-7].
double log_loss(std::span<const float> probabilities, std::span<const float> labels);

// Exact ROC AUC (ties get half credit) by sorting all n scores: O(n log n). NaN when one class is
// absent: the AUC is undefined then (it was 0.5, which read as a model no better than chance).
// Scores may be probabilities or logits (only the order matters).
double auc(std::span<const float> scores, std::span<const float> labels);

}  // namespace troupe::nn
