// The embedding rows of one batch (the native embedding layer's output, the TorchScript backend's
// `emb` input), and their gradient back into the table's sparse gradient: the batch's ids are hashed
// once (id_slots, reused from step to step, no allocation once grown), the table is looked up once
// per distinct id (a DeepFM batch of 256 x 8 ids holds ~500), and the gradient rows are summed by the
// occurrence -> distinct index kept from the gather.
//
// The sums: distinct ids in order of first appearance, each row the first occurrence's gradient plus
// the later ones in batch order (what a plain map from id to row gives, bit for bit).
// Not thread-safe; a gather's indices serve the next combine only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "troupe/nn/data/dataset.hpp"
#include "troupe/nn/embedding_table.hpp"

namespace troupe::nn {

// The distinct sparse ids of `b` (every field), sorted: what a worker pulls for it.
std::vector<std::uint64_t> sorted_distinct_ids(const batch& b);

class sparse_batch {
 public:
  // The rows of `ids` (one per occurrence; rows missing from `table` are created as row() does)
  // into out[ids.size() x table.dim()].
  void gather(std::span<const std::uint64_t> ids, embedding_table& table, float* out);
  // rows[ids.size() x dim] (the gradient of each occurrence of the last gather) summed per distinct
  // id into `grad` (its storage reused).
  void combine(const float* rows, std::size_t dim, sparse_grad& grad) const;
  // Whether `ids` are those of the last gather (a combine is for them only).
  bool gathered(std::span<const std::uint64_t> ids) const;
  // The distinct ids of the last gather, in order of first appearance.
  std::span<const std::uint64_t> distinct() const { return distinct_; }

 private:
  id_slots slots_;
  std::vector<std::uint64_t> distinct_;
  std::vector<const float*> rows_;         // the table's row of each distinct id
  std::vector<std::uint64_t> ids_;         // the last gather's
  std::vector<std::uint32_t> occurrence_;  // per occurrence: its index in distinct_
};

}  // namespace troupe::nn
