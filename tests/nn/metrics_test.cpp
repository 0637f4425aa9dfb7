#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "troupe/nn/metrics.hpp"

namespace troupe::nn {
namespace {

TEST(metrics, accuracy_takes_the_argmax) {
  std::vector<float> scores{0.1f, 0.7f, 0.2f, 0.5f, 0.3f, 0.2f};
  std::vector<float> labels{1, 2};
  EXPECT_DOUBLE_EQ(accuracy(scores, 3, labels), 0.5);
}

TEST(metrics, log_loss_matches_hand_computation_and_clips) {
  std::vector<float> p{0.8f, 0.4f}, y{1, 0};
  EXPECT_NEAR(log_loss(p, y), -(std::log(0.8) + std::log(0.6)) / 2, 1e-6);
  std::vector<float> hard{0.0f}, one{1};
  EXPECT_NEAR(log_loss(hard, one), -std::log(1e-7), 1e-3);
}

TEST(metrics, auc_is_exact_with_ties) {
  // Pairs (pos, neg): (0.8,0.1) win, (0.8,0.4) win, (0.4,0.1) win, (0.4,0.4) tie -> 3.5 / 4.
  std::vector<float> s{0.8f, 0.4f, 0.1f, 0.4f}, y{1, 1, 0, 0};
  EXPECT_DOUBLE_EQ(auc(s, y), 0.875);
  std::vector<float> perfect{0.9f, 0.1f}, py{1, 0};
  EXPECT_DOUBLE_EQ(auc(perfect, py), 1.0);
  // One class only: no AUC is defined (0.5 read as a model no better than chance).
  std::vector<float> one_class{0, 0};
  EXPECT_TRUE(std::isnan(auc(perfect, one_class)));
  EXPECT_TRUE(std::isnan(score_predictions(perfect, 1, one_class, 0).auc));
}

// A score that is no number (a model whose output is NaN on some rows) is left out of the ranks: it
// hung the tie loop for good (troupe evaluate, a job's own evaluation).
TEST(metrics, auc_leaves_out_scores_that_are_no_number) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> s{0.8f, nan, 0.4f, 0.1f, nan, 0.4f}, y{1, 1, 1, 0, 0, 0};
  EXPECT_DOUBLE_EQ(auc(s, y), 0.875);  // as without the NaN rows
  std::vector<float> all_nan{nan, nan}, py{1, 0};
  EXPECT_TRUE(std::isnan(auc(all_nan, py)));
  EXPECT_TRUE(std::isnan(score_predictions(all_nan, 1, py, 0).auc));
}

// A row whose scores are not all finite is no prediction: wrong, whatever its label (a binary NaN
// read as class 0, right for every negative row; a NaN among a row's class scores left the argmax
// to where max_element stopped).
TEST(metrics, a_row_without_a_finite_score_counts_as_wrong) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> binary{0.8f, nan, 0.2f, nan}, y{1, 0, 0, 1};
  EXPECT_DOUBLE_EQ(score_predictions(binary, 1, y, 0).accuracy, 0.5);
  std::vector<float> classes{0.1f, 0.7f, 0.2f, nan, 0.3f, 0.2f, 0.1f, inf, 0.1f}, labels{1, 0, 1};
  EXPECT_DOUBLE_EQ(accuracy(classes, 3, labels), 1.0 / 3);
}

}  // namespace
}  // namespace troupe::nn
