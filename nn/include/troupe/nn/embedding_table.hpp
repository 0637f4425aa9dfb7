// An embedding table: rows of `dim` floats keyed by a uint64 id, created lazily on first use.
//
// A new row is a pure function of (seed, id) (see init_row), so a parameter-server shard and a
// worker that never talked create the identical row. Workers overwrite rows pulled from a PS
// with write_rows() before forward, and after backward take the table's sparse gradient: the
// unique ids of the batch and one combined (summed) gradient row per id. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "troupe/nn/row_store.hpp"

namespace troupe::nn {

struct embedding_init {
  enum class kind { normal, uniform, zeros } type = kind::normal;
  float scale = 0.01f;  // stddev (normal) or half-width (uniform)
};

// Gradients of some rows: ids[i] owns rows[i*dim, (i+1)*dim). Ids are unique.
struct sparse_grad {
  std::size_t dim = 0;
  std::vector<std::uint64_t> ids;
  std::vector<float> rows;
  void clear() {
    ids.clear();
    rows.clear();
  }
  std::size_t size() const { return ids.size(); }
  const float* row(std::size_t i) const { return rows.data() + i * dim; }
};

class embedding_table {
 public:
  embedding_table(std::string name, std::size_t dim, std::uint64_t seed, embedding_init init = {});

  const std::string& name() const { return name_; }
  std::size_t dim() const { return dim_; }
  std::uint64_t seed() const { return seed_; }
  // With name, dim and seed: everything a parameter-server shard needs to create the same rows.
  const embedding_init& init() const { return init_; }
  std::size_t size() const { return rows_.size(); }  // rows created so far
  bool contains(std::uint64_t id) const { return rows_.find(id) != row_store::npos; }

  // The initial value of row `id` (what row() creates), into out[dim].
  void init_row(std::uint64_t id, float* out) const;
  // The row of `id`, created from init_row on first use. Valid until clear() (rows never move).
  float* row(std::uint64_t id);
  void prefetch(std::uint64_t id) const { rows_.prefetch(id); }  // of row(id)'s index entry
  // Copies the rows of `ids` (created lazily) into out[ids.size() x dim].
  void read_rows(std::span<const std::uint64_t> ids, float* out);
  // Overwrites (or creates) the rows of `ids` from rows[ids.size() x dim].
  void write_rows(std::span<const std::uint64_t> ids, const float* rows);
  // Calls f(id, const float* row) for every row, in unspecified order.
  template <class F>
  void for_each(F&& f) const {
    rows_.for_each([&](std::uint64_t id, std::uint32_t slot) { f(id, rows_.row(slot)); });
  }
  void clear();

  // The sparse gradient left by the last backward pass (filled by embedding layers).
  sparse_grad& grad() { return grad_; }
  const sparse_grad& grad() const { return grad_; }

 private:
  std::string name_;
  std::size_t dim_;
  std::uint64_t seed_;
  embedding_init init_;
  row_store rows_;
  sparse_grad grad_;
};

// The ids of one step, each with a small slot (the position its first occurrence was given), in a
// table reused step after step: open addressing over a power of two, a generation stamp per entry
// in place of a clear. A std::unordered_map cleared and refilled every step cost a node allocation
// per id (combining a DeepFM step's sparse gradient that way was 24% of the step, a tenth of it
// malloc and free).
class id_slots {
 public:
  // Starts an empty set for up to `n` ids (the table grows to twice that, and keeps its largest size).
  void reset(std::size_t n) {
    std::size_t cap = 64;
    while (cap < 2 * n) cap <<= 1;
    if (cap > t_.size()) {
      t_.assign(cap, entry{});
      gen_ = 0;
    }
    mask_ = cap - 1;    // the first cap entries only: a large evaluation batch leaves the steps after it
                        // probing a small, cache-resident part
    if (++gen_ == 0) {  // after 2^32 steps: every stamp back to "empty"
      for (auto& e : t_) e.gen = 0;
      gen_ = 1;
    }
  }
  // The slot of `id` in this set; a new id is given `next` (`added` then true).
  std::uint32_t find_or_add(std::uint64_t id, std::uint32_t next, bool& added) {
    std::size_t j = static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> 20) & mask_;
    while (t_[j].gen == gen_ && t_[j].id != id) j = (j + 1) & mask_;
    added = t_[j].gen != gen_;
    if (added) t_[j] = entry{id, next, gen_};
    return t_[j].slot;
  }

 private:
  struct entry {
    std::uint64_t id = 0;
    std::uint32_t slot = 0, gen = 0;
  };
  std::vector<entry> t_;
  std::uint32_t gen_ = 0;
  std::size_t mask_ = 0;
};

}  // namespace troupe::nn
