// The mean and standard deviation of dense columns over the rows added (`--standardize`): the
// population deviation (divided by n, as scikit-learn's StandardScaler), by Welford's update,
// which keeps its precision when the mean is large against the spread. A NaN value is a missing one
// to be filled with the mean of the column's present values (`--missing mean`): the mean is theirs
// and the deviation is over every row, a filled one adding none (scikit-learn's SimpleImputer
// with strategy "mean", then StandardScaler).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/storage/row_format.hpp"

namespace troupe::job {

class column_stats {
 public:
  column_stats() = default;
  // `columns`: indices into a record's dense values.
  explicit column_stats(std::vector<std::size_t> columns)
      : columns_(std::move(columns)),
        mean_(columns_.size()),
        m2_(columns_.size()),
        present_(columns_.size()) {}

  void add(const std::vector<float>& dense) {
    ++n_;
    for (std::size_t k = 0; k < columns_.size(); ++k) {
      const double x = dense[columns_[k]];
      if (std::isnan(x)) continue;
      const double d = x - mean_[k];
      mean_[k] += d / static_cast<double>(++present_[k]);
      m2_[k] += d * (x - mean_[k]);
    }
  }
  std::uint64_t rows() const { return n_; }

  // The k-th column's mean of its present values, and how many there were.
  double mean(std::size_t k) const { return mean_[k]; }
  std::uint64_t present(std::size_t k) const { return present_[k]; }

  // The scale of each column in `which` (indices into the constructor's columns), named after
  // names[column].
  std::vector<storage::column_scale> scales(const std::vector<std::string>& names,
                                            const std::vector<std::size_t>& which) const {
    std::vector<storage::column_scale> out;
    for (auto k : which)
      out.push_back({names[columns_[k]], mean_[k], n_ > 0 ? std::sqrt(m2_[k] / static_cast<double>(n_)) : 0});
    return out;
  }

 private:
  std::vector<std::size_t> columns_;
  std::vector<double> mean_, m2_;
  std::vector<std::uint64_t> present_;
  std::uint64_t n_ = 0;
};

}  // namespace troupe::job
