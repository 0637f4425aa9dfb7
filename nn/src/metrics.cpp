#include "troupe/nn/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace troupe::nn {

bool scored(const float* row, std::size_t width) {
  return std::all_of(row, row + width, [](float x) { return std::isfinite(x); });
}

double accuracy(std::span<const float> scores, std::size_t classes, std::span<const float> labels) {
  if (labels.empty() || classes == 0) return 0;
  std::size_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* row = scores.data() + i * classes;
    if (!scored(row, classes)) continue;  // no prediction
    auto best = static_cast<std::size_t>(std::max_element(row, row + classes) - row);
    correct += best == static_cast<std::size_t>(labels[i]);
  }
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

double log_loss(std::span<const float> probabilities, std::span<const float> labels) {
  if (labels.empty()) return 0;
  double sum = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    double p = std::clamp(static_cast<double>(probabilities[i]), 1e-7, 1 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return sum / static_cast<double>(labels.size());
}

double auc(std::span<const float> scores, std::span<const float> labels) {
  // A score that is no number (a model whose output is NaN on some rows) ranks nowhere: any NaN
  // made the sort's comparison no order and the tie loop below never advance (troupe evaluate, and a
  // job's own evaluation, hung for good). Such rows are left out; none left: no AUC.
  std::vector<std::uint32_t> order;
  order.reserve(labels.size());
  for (std::uint32_t i = 0; i < labels.size(); ++i)
    if (!std::isnan(scores[i])) order.push_back(i);
  const std::size_t n = order.size();
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return scores[a] < scores[b]; });
  // Sum of the (tie-averaged) ranks of the positives: Mann-Whitney U.
  double rank_sum = 0, positives = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    double avg_rank = (static_cast<double>(i) + static_cast<double>(j - 1)) / 2.0 + 1.0;
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        positives += 1;
      }
    i = j;
  }
  double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

eval_result score_predictions(std::span<const float> scores, std::size_t width, std::span<const float> labels,
                              double loss_sum) {
  eval_result r;
  r.rows = labels.size();
  if (r.rows == 0) return r;
  r.loss = loss_sum / static_cast<double>(r.rows);
  if (width == 1) {
    std::size_t right = 0;
    for (std::size_t i = 0; i < r.rows; ++i)
      right += scored(&scores[i], 1) && (scores[i] >= 0.5f) == (labels[i] > 0.5f);
    r.accuracy = static_cast<double>(right) / static_cast<double>(r.rows);
    r.auc = auc(scores.first(r.rows), labels);
  } else {
    r.accuracy = accuracy(scores, width, labels);
  }
  return r;
}

}  // namespace troupe::nn
