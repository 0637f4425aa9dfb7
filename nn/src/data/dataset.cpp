#include "troupe/nn/data/dataset.hpp"

#include <algorithm>
#include <cmath>

#include "troupe/nn/errc.hpp"

namespace troupe::nn {

expected<void> dataset::validate() const {
  auto fail = [&](const std::string& what) {
    return make_unexpected(nn_errc::bad_shape, info.name + ": " + what);
  };
  if (dense.size() != rows * info.dense_dim)
    return fail("dense has " + std::to_string(dense.size()) +
                " floats, expected rows*dense_dim = " + std::to_string(rows * info.dense_dim));
  if (sparse.size() != rows * info.sparse_fields)
    return fail("sparse has " + std::to_string(sparse.size()) +
                " ids, expected rows*sparse_fields = " + std::to_string(rows * info.sparse_fields));
  if (labels.size() != rows)
    return fail("labels has " + std::to_string(labels.size()) + " entries, expected " + std::to_string(rows));
  const float classes = static_cast<float>(std::max<std::size_t>(info.num_classes, 2));
  for (std::size_t r = 0; r < rows; ++r)
    if (!(labels[r] >= 0 && labels[r] < classes) || labels[r] != std::floor(labels[r]))
      return fail("row " + std::to_string(r) + ": label " + std::to_string(labels[r]) +
                  " is not a class in [0, " + std::to_string(static_cast<int>(classes)) + ")");
  return {};
}

dataset dataset::zeros(const dataset_info& info, std::size_t rows) {
  dataset d;
  d.info = info;
  d.rows = rows;
  d.dense.assign(rows * info.dense_dim, 0.0f);
  d.sparse.assign(rows * info.sparse_fields, 0);
  d.labels.assign(rows, 0.0f);
  return d;
}

dataset dataset::slice(std::size_t first, std::size_t count) const {
  dataset out;
  out.info = info;
  first = std::min(first, rows);
  count = std::min(count, rows - first);
  out.rows = count;
  out.dense.assign(dense.begin() + first * info.dense_dim, dense.begin() + (first + count) * info.dense_dim);
  out.sparse.assign(sparse.begin() + first * info.sparse_fields,
                    sparse.begin() + (first + count) * info.sparse_fields);
  out.labels.assign(labels.begin() + first, labels.begin() + first + count);
  return out;
}

}  // namespace troupe::nn
