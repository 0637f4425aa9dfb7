#include "sparse_batch.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

namespace troupe::actors {

namespace {

// Fibonacci hashing: field-encoded ids (field * buckets + rank) are dense in their low bits.
std::size_t hash_of(std::uint64_t id, std::size_t mask) {
  return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

}  // namespace

std::vector<std::uint64_t> sorted_distinct_ids(const nn::batch& b) {
  const std::size_t fields = b.data().info.sparse_fields;
  std::vector<std::uint64_t> ids(b.size() * fields);
  for (std::size_t i = 0; i < b.size(); ++i) std::copy_n(b.sparse_row(i), fields, ids.data() + i * fields);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void sparse_batch::reset(std::size_t occurrences) {
  // At most half full (every occurrence may be a distinct id); only the part this batch uses is
  // cleared, so that a large evaluation batch does not slow the training steps after it.
  const std::size_t want = std::bit_ceil(std::max<std::size_t>(16, 2 * occurrences));
  if (slots_.size() < want) {
    keys_.resize(want);
    slots_.resize(want);
  }
  std::fill_n(slots_.begin(), want, 0u);
  mask_ = want - 1;
  distinct_.clear();
  occurrence_.resize(occurrences);
}

std::uint32_t sparse_batch::index_of(std::uint64_t id) {
  for (std::size_t h = hash_of(id, mask_);; h = (h + 1) & mask_) {
    if (slots_[h] == 0) {
      keys_[h] = id;
      distinct_.push_back(id);
      slots_[h] = static_cast<std::uint32_t>(distinct_.size());
      return slots_[h] - 1;
    }
    if (keys_[h] == id) return slots_[h] - 1;
  }
}

void sparse_batch::gather(std::span<const std::uint64_t> ids, nn::embedding_table& table, float* out) {
  reset(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) occurrence_[i] = index_of(ids[i]);
  rows_.resize(distinct_.size());
  for (std::size_t k = 0; k < distinct_.size(); ++k) rows_[k] = table.row(distinct_[k]);
  const std::size_t dim = table.dim();
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::memcpy(out + i * dim, rows_[occurrence_[i]], dim * sizeof(float));
}

void sparse_batch::combine(const float* rows, std::size_t dim, nn::sparse_grad& grad) const {
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

}  // namespace troupe::actors
