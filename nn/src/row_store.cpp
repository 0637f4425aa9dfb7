#include "troupe/nn/row_store.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace troupe::nn {

slab_arena::block slab_arena::allocate_block(std::size_t bytes, bool huge) {
  const std::size_t align = huge ? kHuge : 64;
  bytes = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple of the alignment
  block b(static_cast<std::byte*>(std::aligned_alloc(align, bytes)));
  if (!b) throw std::bad_alloc();
  // Before the first touch, so that the kernel can fault huge pages in; a hint only (THP may be
  // off), so its result does not matter.
  if (huge) (void)::madvise(b.get(), bytes, MADV_HUGEPAGE);
  return b;
}

void* slab_arena::allocate(std::size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  if (blocks_.empty()) {
    blocks_.push_back(allocate_block(std::max<std::size_t>(bytes, 64), false));
    return blocks_.back().get();
  }
  if (left_ < bytes) {
    const std::size_t chunk = std::max(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
    blocks_.push_back(allocate_block(chunk, true));
    next_ = blocks_.back().get();
    left_ = chunk;
  }
  void* p = next_;
  next_ += bytes;
  left_ -= bytes;
  return p;
}

void slab_arena::clear() {
  if (blocks_.size() > 1) blocks_.erase(blocks_.begin() + 1, blocks_.end());
  next_ = nullptr;
  left_ = 0;
}

std::uint32_t row_store::find(std::uint64_t id) const {
  if (capacity_ == 0) return npos;
  const std::size_t mask = capacity_ - 1;
  for (std::size_t i = home(id, mask);; i = (i + 1) & mask) {
    const entry& e = index_[i];
    if (e.slot1 == 0) return npos;
    if (e.id == id) return e.slot1 - 1;
  }
}

std::uint32_t row_store::insert(std::uint64_t id, bool& created) {
  if (2 * (ids_.size() + 1) > capacity_) grow_index();
  const std::size_t mask = capacity_ - 1;
  std::size_t i = home(id, mask);
  for (; index_[i].slot1 != 0; i = (i + 1) & mask)
    if (index_[i].id == id) {
      created = false;
      return index_[i].slot1 - 1;
    }
  const auto slot = static_cast<std::uint32_t>(ids_.size());
  if ((slot >> kSlabShift) == slabs_.size())
    slabs_.push_back(static_cast<float*>(arena_.allocate(kSlabRows * width_ * sizeof(float))));
  index_[i] = entry{id, slot + 1};
  ids_.push_back(id);
  std::fill_n(row(slot), width_, fill_);
  created = true;
  return slot;
}

void row_store::grow_index() {
  const std::size_t cap = std::max<std::size_t>(64, 2 * capacity_), bytes = cap * sizeof(entry);
  auto storage = slab_arena::allocate_block(bytes, bytes >= slab_arena::kHuge);
  auto* index = reinterpret_cast<entry*>(storage.get());
  std::fill_n(index, cap, entry{0, 0});
  const std::size_t mask = cap - 1;
  for (std::size_t k = 0; k < capacity_; ++k) {
    const entry& e = index_[k];
    if (e.slot1 == 0) continue;
    std::size_t i = home(e.id, mask);
    while (index[i].slot1 != 0) i = (i + 1) & mask;
    index[i] = e;
  }
  index_storage_ = std::move(storage);
  index_ = index;
  capacity_ = cap;
}

void row_store::clear() {
  std::fill_n(index_, capacity_, entry{0, 0});
  ids_.clear();
  if (slabs_.size() > 1) slabs_.erase(slabs_.begin() + 1, slabs_.end());
  arena_.clear();  // keeps the first block: the first slab
}

}  // namespace troupe::nn
