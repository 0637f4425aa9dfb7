#include "troupe/nn/row_store.hpp"

#include <algorithm>

namespace troupe::nn {
std::uint32_t row_store::find(std::uint64_t id) const {
  if (index_.empty()) return npos;
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = home(id, mask);; i = (i + 1) & mask) {
    const entry& e = index_[i];
    if (e.slot1 == 0) return npos;
    if (e.id == id) return e.slot1 - 1;
  }
}

std::uint32_t row_store::insert(std::uint64_t id, bool& created) {
  if (2 * (ids_.size() + 1) > index_.size()) grow_index();
  const std::size_t mask = index_.size() - 1;
  std::size_t i = home(id, mask);
  for (; index_[i].slot1 != 0; i = (i + 1) & mask)
    if (index_[i].id == id) {
      created = false;
      return index_[i].slot1 - 1;
    }
  const auto slot = static_cast<std::uint32_t>(ids_.size());
  if ((slot >> kSlabShift) == slabs_.size()) slabs_.push_back(std::make_unique<float[]>(kSlabRows * width_));
  index_[i] = entry{id, slot + 1};
  ids_.push_back(id);
  std::fill_n(row(slot), width_, fill_);
  created = true;
  return slot;
}

void row_store::grow_index() {
  std::vector<entry> old(std::max<std::size_t>(64, 2 * index_.size()), entry{0, 0});
  old.swap(index_);
  const std::size_t mask = index_.size() - 1;
  for (const entry& e : old) {
    if (e.slot1 == 0) continue;
    std::size_t i = home(e.id, mask);
    while (index_[i].slot1 != 0) i = (i + 1) & mask;
    index_[i] = e;
  }
}

void row_store::clear() {
  std::fill(index_.begin(), index_.end(), entry{0, 0});
  ids_.clear();
  if (slabs_.size() > 1) slabs_.resize(1);
}

}  // namespace troupe::nn
