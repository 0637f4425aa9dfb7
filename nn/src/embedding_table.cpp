#include "troupe/nn/embedding_table.hpp"

#include <algorithm>
#include <cstring>

#include "troupe/nn/random.hpp"

namespace troupe::nn {

embedding_table::embedding_table(std::string name, std::size_t dim, std::uint64_t seed, embedding_init init)
    : name_(std::move(name)), dim_(dim), seed_(seed), init_(init), rows_(dim) {
  grad_.dim = dim;
}

void embedding_table::init_row(std::uint64_t id, float* out) const {
  for (std::size_t k = 0; k < dim_; ++k) {
    switch (init_.type) {
      case embedding_init::kind::zeros:
        out[k] = 0;
        break;
      case embedding_init::kind::uniform:
        out[k] = static_cast<float>((2 * hashed_uniform(seed_, id, k) - 1) * init_.scale);
        break;
      case embedding_init::kind::normal:
        out[k] = static_cast<float>(hashed_normal(seed_, id, k) * init_.scale);
        break;
    }
  }
}

float* embedding_table::row(std::uint64_t id) {
  bool created = false;
  float* r = rows_.row(rows_.insert(id, created));
  if (created) init_row(id, r);
  return r;
}

// In batches (as apply_sparse): the next batch's index entries are prefetched while this batch's
// rows are found and prefetched, then this batch is copied.
void embedding_table::read_rows(std::span<const std::uint64_t> ids, float* out) {
  constexpr std::size_t kBatch = 32;
  const float* r[kBatch];
  for (std::size_t base = 0; base < ids.size(); base += kBatch) {
    const std::size_t n = std::min(kBatch, ids.size() - base);
    for (std::size_t j = base + kBatch; j < std::min(base + 2 * kBatch, ids.size()); ++j)
      rows_.prefetch(ids[j]);
    for (std::size_t j = 0; j < n; ++j) {
      r[j] = row(ids[base + j]);
      __builtin_prefetch(r[j]);
      __builtin_prefetch(r[j] + dim_ - 1);
    }
    for (std::size_t j = 0; j < n; ++j) std::memcpy(out + (base + j) * dim_, r[j], dim_ * sizeof(float));
  }
}

void embedding_table::write_rows(std::span<const std::uint64_t> ids, const float* rows) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::memcpy(row(ids[i]), rows + i * dim_, dim_ * sizeof(float));
}

void embedding_table::clear() {
  rows_.clear();
  grad_.clear();
}

}  // namespace troupe::nn
