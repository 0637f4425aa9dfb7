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

// Combines per-occurrence gradient rows into per-id sums: rows[i] belongs to ids[i] (ids may
// repeat). Reuses out's storage; `slot` is scratch (id -> position in out).
void combine_sparse_rows(std::span<const std::uint64_t> ids, const float* rows, std::size_t dim,
                         sparse_grad& out, std::unordered_map<std::uint64_t, std::uint32_t>& slot);

}  // namespace troupe::nn
