#include "troupe/nn/sparse_batch.hpp"

#include <algorithm>
#include <cstring>

namespace troupe::nn {

std::vector<std::uint64_t> sorted_distinct_ids(const batch& b) {
  const std::size_t fields = b.data().info.sparse_fields;
  std::vector<std::uint64_t> ids(b.size() * fields);
  for (std::size_t i = 0; i < b.size(); ++i) std::copy_n(b.sparse_row(i), fields, ids.data() + i * fields);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void sparse_batch::gather(std::span<const std::uint64_t> ids, embedding_table& table, float* out) {
  slots_.reset(ids.size());
  distinct_.clear();
  ids_.assign(ids.begin(), ids.end());
  occurrence_.resize(ids.size());
  bool added = false;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    occurrence_[i] = slots_.find_or_add(ids[i], static_cast<std::uint32_t>(distinct_.size()), added);
    if (added) distinct_.push_back(ids[i]);
  }
  rows_.resize(distinct_.size());
  for (std::size_t k = 0; k < distinct_.size(); ++k) rows_[k] = table.row(distinct_[k]);
  const std::size_t dim = table.dim();
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::memcpy(out + i * dim, rows_[occurrence_[i]], dim * sizeof(float));
}

bool sparse_batch::gathered(std::span<const std::uint64_t> ids) const {
  return ids.size() == ids_.size() && std::equal(ids.begin(), ids.end(), ids_.begin());
}

void sparse_batch::combine(const float* rows, std::size_t dim, sparse_grad& grad) const {
  grad.dim = dim;
  grad.ids.assign(distinct_.begin(), distinct_.end());
  grad.rows.resize(distinct_.size() * dim);
  float* out = grad.rows.data();
  // Distinct indices are handed out in order of first appearance: occurrence i is its id's first
  // exactly when its index is the next one not seen yet.
  std::uint32_t seen = 0;
  for (std::size_t i = 0; i < occurrence_.size(); ++i) {
    const std::uint32_t k = occurrence_[i];
    float* dst = out + static_cast<std::size_t>(k) * dim;
    const float* src = rows + i * dim;
    if (k == seen) {
      std::memcpy(dst, src, dim * sizeof(float));
      ++seen;
    } else {
      for (std::size_t d = 0; d < dim; ++d) dst[d] += src[d];
    }
  }
}

}  // namespace troupe::nn
