#include "troupe/gpu/row_map.hpp"

namespace troupe::gpu {

void row_map::map_batch(std::span<const std::uint64_t> ids) {
  occ_rows_.resize(ids.size());
  occ_unique_.resize(ids.size());
  unique_rows_.clear();
  unique_ids_.clear();
  new_ids_.clear();
  new_rows_.clear();
  batch_slot_.clear();
  for (std::size_t o = 0; o < ids.size(); ++o) {
    const std::uint64_t id = ids[o];
    auto [row, fresh] = rows_.try_emplace(id, static_cast<std::int32_t>(rows_.size()));
    if (fresh) {
      new_ids_.push_back(id);
      new_rows_.push_back(row->second);
    }
    auto [slot, first] = batch_slot_.try_emplace(id, static_cast<std::int32_t>(unique_ids_.size()));
    if (first) {
      unique_ids_.push_back(id);
      unique_rows_.push_back(row->second);
    }
    occ_rows_[o] = row->second;
    occ_unique_[o] = slot->second;
  }
}

std::int32_t row_map::find(std::uint64_t id) const {
  auto it = rows_.find(id);
  return it == rows_.end() ? -1 : it->second;
}

void row_map::clear() {
  rows_.clear();
  batch_slot_.clear();
  occ_rows_.clear();
  occ_unique_.clear();
  unique_rows_.clear();
  unique_ids_.clear();
  new_ids_.clear();
  new_rows_.clear();
}

}  // namespace troupe::gpu
