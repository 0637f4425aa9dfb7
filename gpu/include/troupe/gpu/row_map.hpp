// The host side of a device embedding table: which device row holds which id, and the index
// arrays one batch needs on the device (gather, scatter-add, optimizer on touched rows).
//
// Rows are assigned densely in order of first sight (0, 1, 2, ...) and never move, so a device
// table only grows. Distinct ids of a batch are listed in order of first occurrence, the order
// nn::sparse_batch gives its sparse gradient. Plain C++, no CUDA; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace troupe::gpu {

class row_map {
 public:
  // Maps one batch's ids (with repeats, in occurrence order) and fills the arrays below.
  void map_batch(std::span<const std::uint64_t> ids);

  // Of the last map_batch():
  const std::vector<std::int32_t>& occurrence_rows() const { return occ_rows_; }      // device row
  const std::vector<std::int32_t>& occurrence_unique() const { return occ_unique_; }  // index into unique
  const std::vector<std::int32_t>& unique_rows() const { return unique_rows_; }
  const std::vector<std::uint64_t>& unique_ids() const { return unique_ids_; }
  // Ids first seen in the last batch and their new rows (the caller initialises those rows).
  const std::vector<std::uint64_t>& new_ids() const { return new_ids_; }
  const std::vector<std::int32_t>& new_rows() const { return new_rows_; }

  std::size_t size() const { return rows_.size(); }  // rows assigned so far
  // The row of `id`, or -1.
  std::int32_t find(std::uint64_t id) const;
  template <class F>
  void for_each(F&& f) const {  // f(id, row)
    for (const auto& [id, row] : rows_) f(id, row);
  }
  void clear();

 private:
  std::unordered_map<std::uint64_t, std::int32_t> rows_;
  std::unordered_map<std::uint64_t, std::int32_t> batch_slot_;  // id -> index into unique, per batch
  std::vector<std::int32_t> occ_rows_, occ_unique_, unique_rows_, new_rows_;
  std::vector<std::uint64_t> unique_ids_, new_ids_;
};

}  // namespace troupe::gpu
