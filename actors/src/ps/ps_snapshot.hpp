// A consistent copy of a PS shard's parameters, taken between requests a slice at a time, so that
// a checkpoint never holds up a pull or a push for longer than one slice (docs/job.md, "PS
// checkpoints").
//
// At the start (the checkpoint's moment) the dense tensors and their slots are copied whole, and
// for each embedding table the rows to copy are fixed: a full snapshot takes every row that has
// optimizer state (rows that never had a push are their initial value, recreated from the id), an
// incremental one the rows pushed since the last checkpoint (the table's dirty set, which starts
// over empty). copy_some() then copies rows until its time budget is spent. A push that arrives
// meanwhile first calls before_update(), which copies the rows it is about to change that are not
// copied yet: every row is taken as it was at the start. Rows created after the start are not in
// it. Not thread-safe: the shard's actor does all of it; take() hands the result to the writer.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::actors {

struct owned_dense {
  nn::dense_param* param = nullptr;
  nn::dense_slots slots;
};

struct owned_table {
  owned_table(nn::embedding_table* t, const nn::optimizer& opt) : table(t), slots(t->dim(), opt) {}
  nn::embedding_table* table;
  nn::row_slots slots;
  nn::slot_set dirty;  // rows updated since the last checkpoint, by their slot number in `slots`
};

// Step counters travel in a checkpoint as two floats holding the u64's bits, after the slots.
void put_step(std::vector<float>& v, std::uint64_t step);
std::uint64_t get_step(const float* f);

// The memory a snapshot fills, kept from one checkpoint to the next, so that the shard's actor
// neither faults in fresh pages while it copies nor unmaps the last snapshot's (a munmap of a few
// hundred MB takes 10-30 ms, and every request behind it waits). The write's thread empties it
// (recycle()) and hands it back; the shard keeps one, as large as its largest snapshot so far.
struct snapshot_buffers {
  storage::flat_state state;                // the copy; recycled: empty, each vector's capacity kept
  std::vector<nn::slot_set> dirty;          // the dirty sets the snapshot took; recycled: emptied
  std::vector<storage::flat_rows> retired;  // buffers too small for a snapshot: recycle() frees them
  // Off the shard's actor, after the write: frees `retired` and empties the rest, keeping room for
  // a quarter more rows than this snapshot took (a buffer that grows is touched here, page by page).
  void recycle();
};

class ps_snapshot {
 public:
  // Starts the snapshot of `dense` and `tables` (which must outlive it and keep their entries),
  // copying into `reuse` (the last snapshot's buffers, recycled) where they are large enough.
  ps_snapshot(const std::map<std::string, owned_dense>& dense, std::map<std::string, owned_table>& tables,
              bool full, snapshot_buffers reuse = {});

  bool full() const { return full_; }
  // One more entry of the dense slots' section, taken as it is now (a shard's estimate of its
  // gradient noise: push_noise::state()).
  void add_dense_slot(std::string name, std::vector<float> values);
  // Copies rows for about `budget` (checked every few rows); true once every row is copied.
  bool copy_some(std::chrono::nanoseconds budget);
  bool done() const;
  // Before `ids` of `t` change: copies those still to copy.
  // (Creates the optimizer state of ids that have none, as the push would.)
  void before_update(owned_table& t, std::span<const std::uint64_t> ids);
  std::uint64_t rows() const;   // rows copied so far
  std::uint64_t bytes() const;  // payload bytes copied so far (floats)
  // The copy (once done()), in buffers to recycle after the write. The snapshot is empty after it.
  snapshot_buffers take();

 private:
  // Starting costs O(tables), not O(rows): the dirty set is taken whole (swapped for an empty
  // one), and the bitmap of copied rows starts zeroed (an eighth of a byte a row).
  struct table_copy {
    owned_table* t = nullptr;
    std::uint32_t frozen = 0;           // slots that existed at the start
    nn::slot_set taken;                 // incremental: the slots to copy; full: all of [0, frozen)
    std::size_t count = 0, cursor = 0;  // rows to copy; the next position of the walk
    std::vector<std::uint64_t> copied;  // bit per slot below frozen
    storage::flat_rows rows, slots;
    bool is_pending(std::uint32_t s, bool full) const {
      return s < frozen && (copied[s >> 6] >> (s & 63) & 1) == 0 && (full || taken.contains(s));
    }
    void copy(std::uint32_t s);
  };
  // `r` emptied for `count` rows of `width`, named `name`: reused when large enough, else retired
  // (to be freed after the write) for a new buffer with room for a quarter more.
  void prepare(storage::flat_rows& r, const std::string& name, std::size_t width, std::size_t count);

  bool full_;
  storage::flat_state out_;
  std::vector<storage::flat_rows> retired_;
  std::vector<table_copy> tables_;
  std::size_t next_table_ = 0;  // the walk's table
};

}  // namespace troupe::actors
