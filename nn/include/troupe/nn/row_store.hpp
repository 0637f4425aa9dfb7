// Fixed-width float rows keyed by a uint64 id: the storage of embedding tables and their optimizer
// slots (a parameter-server shard's row store).
//
// The index is an open-addressing hash table (linear probing, power-of-two capacity, at most half
// full) from id to a dense slot number; growing it rehashes 16-byte entries, never rows. Rows live
// in slabs of kSlabRows rows allocated as needed, so creating a row allocates nothing most of the
// time, and a row never moves: row pointers stay valid until clear(). Not thread-safe.
//
// Memory: slabs are 64-byte aligned (a 64-byte row is one cache line, not two). A store that
// grows past its first slab takes the next slabs, and an index past 2 MB, from 2 MB-aligned
// blocks advised as transparent huge pages (where the kernel allows): a shard's random lookups
// over hundreds of MB then miss the TLB rarely instead of on nearly every row. A small store
// (a test's, a small table's) costs one slab and no huge page.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace troupe::nn {

// Memory for slabs: the first block alone (64-byte aligned), later ones carved out of 2 MB-aligned
// chunks advised as huge pages. Blocks live until clear() or the arena's end. Not thread-safe.
class slab_arena {
 public:
  struct free_deleter {
    void operator()(void* p) const { std::free(p); }
  };
  using block = std::unique_ptr<std::byte[], free_deleter>;
  static constexpr std::size_t kHuge = std::size_t{2} << 20;

  // `bytes` of uninitialised memory, 64-byte aligned.
  void* allocate(std::size_t bytes);
  void clear();  // frees every block but the first (which stays valid)
  // `bytes` (> 0), aligned to 64 bytes, or to 2 MB and advised as huge pages when `huge`.
  static block allocate_block(std::size_t bytes, bool huge);

 private:
  std::vector<block> blocks_;
  std::byte* next_ = nullptr;
  std::size_t left_ = 0;
};

class row_store {
 public:
  static constexpr std::uint32_t npos = ~std::uint32_t{0};
  static constexpr std::uint32_t kSlabShift = 12;  // 4096 rows a slab
  static constexpr std::uint32_t kSlabRows = std::uint32_t{1} << kSlabShift;

  // `width` floats a row, each new row filled with `fill`.
  explicit row_store(std::size_t width, float fill = 0.0f) : width_(width), fill_(fill) {}

  std::size_t width() const { return width_; }
  std::size_t size() const { return ids_.size(); }
  // Hints the CPU to load the index entry `id` hashes to (a lookup of many ids: prefetch ahead).
  void prefetch(std::uint64_t id) const {
    if (capacity_ != 0) __builtin_prefetch(&index_[home(id, capacity_ - 1)]);
  }
  // The slot of `id`, or npos.
  std::uint32_t find(std::uint64_t id) const;
  // The slot of `id`, created (row filled with `fill`) if absent; `created` says which.
  std::uint32_t insert(std::uint64_t id, bool& created);
  float* row(std::uint32_t slot) { return slabs_[slot >> kSlabShift] + (slot & (kSlabRows - 1)) * width_; }
  const float* row(std::uint32_t slot) const {
    return slabs_[slot >> kSlabShift] + (slot & (kSlabRows - 1)) * width_;
  }
  std::uint64_t id(std::uint32_t slot) const { return ids_[slot]; }
  // Calls f(id, slot) for every row, in creation order.
  template <class F>
  void for_each(F&& f) const {
    for (std::uint32_t s = 0; s < ids_.size(); ++s) f(ids_[s], s);
  }
  void clear();  // drops every row (keeps one slab and the index's capacity)

 private:
  struct entry {
    std::uint64_t id;
    std::uint32_t slot1;  // slot + 1; 0: empty
  };
  void grow_index();
  // Fibonacci hashing: ids that are small consecutive integers spread over the whole table.
  static std::size_t home(std::uint64_t id, std::size_t mask) {
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
  }

  std::size_t width_;
  float fill_;
  slab_arena::block index_storage_;  // the index's memory
  entry* index_ = nullptr;
  std::size_t capacity_ = 0;        // entries of index_: a power of two, or 0
  std::vector<std::uint64_t> ids_;  // slot -> id
  std::vector<float*> slabs_;       // in arena_
  slab_arena arena_;
};

// A set of slot numbers (of a row_store or row_slots): one bit per slot and the slots in the order
// they were first added. Adding touches one bit of a dense bitmap (an eighth of a byte a slot,
// so it stays in cache where a hash set of ids would miss on every random id); clear() costs the
// set's size, not the slots'. Not thread-safe.
class slot_set {
 public:
  // Adds `slot`; true if it was not in the set.
  bool insert(std::uint32_t slot) {
    const std::size_t word = slot >> 6;
    const std::uint64_t bit = std::uint64_t{1} << (slot & 63);
    if (word >= bits_.size()) bits_.resize(std::max<std::size_t>(word + 1, 2 * bits_.size()), 0);
    if (bits_[word] & bit) return false;
    bits_[word] |= bit;
    slots_.push_back(slot);
    return true;
  }
  bool contains(std::uint32_t slot) const {
    const std::size_t word = slot >> 6;
    return word < bits_.size() && (bits_[word] >> (slot & 63) & 1) != 0;
  }
  std::size_t size() const { return slots_.size(); }
  const std::vector<std::uint32_t>& slots() const { return slots_; }  // in the order first added
  void clear() {
    for (auto s : slots_) bits_[s >> 6] = 0;
    slots_.clear();
  }

 private:
  std::vector<std::uint64_t> bits_;
  std::vector<std::uint32_t> slots_;
};

}  // namespace troupe::nn
