// The mean and standard deviation of dense columns over the rows added (`--standardize`): the
// population deviation (divided by n, as scikit-learn's StandardScaler), by Welford's update,
// which keeps its precision when the mean is large against the spread.
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
      : columns_(std::move(columns)), mean_(columns_.size()), m2_(columns_.size()) {}

  void add(const std::vector<float>& dense) {
    ++n_;
    for (std::size_t k = 0; k < columns_.size(); ++k) {
      const double x = dense[columns_[k]];
      const double d = x - mean_[k];
      mean_[k] += d / static_cast<double>(n_);
      m2_[k] += d * (x - mean_[k]);
    }
  }
  std::uint64_t rows() const { return n_; }

  // One scale per column, named after names[column].
  std::vector<storage::column_scale> scales(const std::vector<std::string>& names) const {
    std::vector<storage::column_scale> out;
    for (std::size_t k = 0; k < columns_.size(); ++k)
      out.push_back({names[columns_[k]], mean_[k], n_ > 0 ? std::sqrt(m2_[k] / static_cast<double>(n_)) : 0});
    return out;
  }

 private:
  std::vector<std::size_t> columns_;
  std::vector<double> mean_, m2_;
  std::uint64_t n_ = 0;
};

}  // namespace troupe::job
