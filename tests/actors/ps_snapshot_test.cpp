// ps_snapshot: copied a slice at a time while pushes change the rows (through before_update, as
// the shard's push handler does), a snapshot holds every row as it was when it began, and the rows
// pushed meanwhile are dirty for the next checkpoint.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "ps/ps_snapshot.hpp"

namespace troupe::actors {
namespace {

using rows_by_id = std::map<std::uint64_t, std::vector<float>>;

std::unique_ptr<nn::optimizer> adam() {
  auto o = nn::make_optimizer({"adam", 0.1});
  EXPECT_TRUE(o);
  return std::move(*o);
}

struct shard {
  shard()
      : table("emb", 4, 11),
        opt(adam()),
        dense_param{std::string(1, 'w'), nn::tensor(nn::shape{3}), {}, true} {
    tables.emplace("emb", owned_table(&table, *opt));
    dense[dense_param.name].param = &dense_param;
  }
  owned_table& t() { return tables.at("emb"); }
  // One push of `ids` (a gradient of 1s), as the shard applies it.
  void push(const std::vector<std::uint64_t>& ids, ps_snapshot* snap) {
    std::vector<float> g(ids.size() * 4, 1.0f);
    if (snap) snap->before_update(t(), ids);
    nn::apply_sparse(*opt, table, ids, g.data(), t().slots, &t().dirty);
  }
  // Rows and slot rows (with the step) of every row with optimizer state, now.
  std::pair<rows_by_id, rows_by_id> state() {
    rows_by_id rows, slots;
    for (std::uint32_t s = 0; s < t().slots.size(); ++s) {
      const auto id = t().slots.id(s);
      const float* r = table.row(id);
      rows[id].assign(r, r + 4);
      auto& sl = slots[id];
      sl.resize(t().slots.width());
      std::uint64_t step = 0;
      EXPECT_TRUE(t().slots.read(id, sl.data(), step));
      put_step(sl, step);
    }
    return {rows, slots};
  }
  nn::embedding_table table;
  std::unique_ptr<nn::optimizer> opt;
  nn::dense_param dense_param;
  std::map<std::string, owned_dense> dense;
  std::map<std::string, owned_table> tables;
};

std::pair<rows_by_id, rows_by_id> as_maps(const storage::flat_state& s) {
  std::pair<rows_by_id, rows_by_id> out;
  for (auto [from, to] : {std::pair{&s.embeddings, &out.first}, std::pair{&s.embedding_slots, &out.second}})
    for (const auto& t : *from)
      for (std::size_t i = 0; i < t.ids.size(); ++i) {
        EXPECT_EQ(to->count(t.ids[i]), 0u) << "row " << t.ids[i] << " copied twice";
        (*to)[t.ids[i]].assign(t.values.begin() + static_cast<std::ptrdiff_t>(i * t.width),
                               t.values.begin() + static_cast<std::ptrdiff_t>((i + 1) * t.width));
      }
  return out;
}

std::vector<std::uint64_t> some_ids(std::mt19937_64& rng, std::size_t n, std::uint64_t space) {
  std::vector<std::uint64_t> ids;
  std::uniform_int_distribution<std::uint64_t> d(0, space - 1);
  while (ids.size() < n) {
    auto id = d(rng);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

TEST(PsSnapshot, FullSnapshotHoldsTheRowsOfItsStartWhilePushesGoOn) {
  shard s;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) s.push(some_ids(rng, 500, 30000), nullptr);
  const auto at_start = s.state();
  ps_snapshot snap(s.dense, s.tables, true);
  EXPECT_EQ(s.t().dirty.size(), at_start.first.size()) << "a full snapshot leaves the dirty set alone";
  int slices = 0;
  // A few rows a slice (a zero budget still copies one batch), and pushes of old and new ids between
  // slices: before_update must take the rows they change first.
  while (!snap.copy_some(std::chrono::nanoseconds(0))) {
    s.push(some_ids(rng, 50, 40000), &snap);
    ++slices;
  }
  EXPECT_GT(slices, 10);
  EXPECT_NE(s.state(), at_start) << "the pushes changed rows";
  EXPECT_EQ(snap.rows(), at_start.first.size());
  auto flat = snap.take().state;
  EXPECT_EQ(as_maps(flat), at_start);
  ASSERT_EQ(flat.dense.size(), 1u);
  EXPECT_EQ(flat.dense[0].second.size(), 3u);
}

TEST(PsSnapshot, IncrementalTakesTheDirtyRowsAndLeavesLaterPushesForTheNext) {
  shard s;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10; ++i) s.push(some_ids(rng, 500, 30000), nullptr);
  s.t().dirty.clear();  // as after a checkpoint
  const auto changed = some_ids(rng, 3000, 30000);
  s.push(changed, nullptr);
  auto at_start = s.state();
  std::erase_if(at_start.first, [&](auto& kv) {
    return std::find(changed.begin(), changed.end(), kv.first) == changed.end();
  });
  std::erase_if(at_start.second, [&](auto& kv) {
    return std::find(changed.begin(), changed.end(), kv.first) == changed.end();
  });
  ps_snapshot snap(s.dense, s.tables, false);
  EXPECT_EQ(s.t().dirty.size(), 0u) << "the snapshot took the dirty rows";
  std::vector<std::uint64_t> later;
  while (!snap.copy_some(std::chrono::nanoseconds(0))) {
    // Half rows of this checkpoint, half others.
    const auto from = changed.begin() + static_cast<std::ptrdiff_t>(rng() % 2900);
    std::vector<std::uint64_t> ids(from, from + 20);
    for (auto id : some_ids(rng, 20, 30000)) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    s.push(ids, &snap);
    later.insert(later.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(as_maps(snap.take().state), at_start);
  std::sort(later.begin(), later.end());
  later.erase(std::unique(later.begin(), later.end()), later.end());
  EXPECT_EQ(s.t().dirty.size(), later.size()) << "rows pushed during the snapshot are dirty for the next";
}

// The next snapshot copies into the last one's buffers, recycled (no fresh memory for the shard's
// actor to fault in, none of the last one's to unmap), and holds exactly what a fresh one would;
// the dirty set the incremental took comes back emptied as the next dirty set. A snapshot larger
// than the room kept retires the buffers it cannot use, for the writer to free.
TEST(PsSnapshot, RecycledBuffersAreReusedAndHoldWhatAFreshSnapshotHolds) {
  shard s;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 20; ++i) s.push(some_ids(rng, 500, 30000), nullptr);
  ps_snapshot first(s.dense, s.tables, true);
  while (!first.copy_some(std::chrono::hours(1))) {
  }
  auto buffers = first.take();
  ASSERT_EQ(buffers.state.embeddings.size(), 1u);
  const std::size_t rows_then = buffers.state.embeddings[0].ids.size();
  buffers.recycle();
  EXPECT_TRUE(buffers.state.embeddings[0].ids.empty());
  EXPECT_GE(buffers.state.embeddings[0].ids.capacity(), rows_then + rows_then / 4) << "room for growth";
  const float* rows_memory = buffers.state.embeddings[0].values.data();
  const float* slots_memory = buffers.state.embedding_slots[0].values.data();

  s.t().dirty.clear();
  const auto changed = some_ids(rng, 2000, 30000);
  s.push(changed, nullptr);
  const std::size_t dirty_before = s.t().dirty.size();
  const auto expected = [&] {
    ps_snapshot fresh(s.dense, s.tables, true);
    while (!fresh.copy_some(std::chrono::hours(1))) {
    }
    return as_maps(fresh.take().state);
  }();
  ps_snapshot full(s.dense, s.tables, true, std::move(buffers));
  while (!full.copy_some(std::chrono::hours(1))) {
  }
  auto again = full.take();
  EXPECT_EQ(as_maps(again.state), expected);
  EXPECT_EQ(again.state.embeddings[0].values.data(), rows_memory) << "copied into the recycled rows";
  EXPECT_EQ(again.state.embedding_slots[0].values.data(), slots_memory);
  EXPECT_TRUE(again.retired.empty());
  EXPECT_EQ(s.t().dirty.size(), dirty_before) << "a full snapshot leaves the dirty set alone";

  // An incremental into the same buffers: takes the dirty set, leaves an emptied one in its place.
  again.recycle();
  ps_snapshot inc(s.dense, s.tables, false, std::move(again));
  EXPECT_EQ(s.t().dirty.size(), 0u);
  while (!inc.copy_some(std::chrono::hours(1))) {
  }
  auto taken = inc.take();
  EXPECT_EQ(taken.state.embeddings[0].ids.size(), dirty_before);
  ASSERT_EQ(taken.dirty.size(), 1u);
  EXPECT_EQ(taken.dirty[0].size(), dirty_before) << "the set taken goes to the writer, emptied there";
  taken.recycle();
  EXPECT_EQ(taken.dirty[0].size(), 0u);

  // Far more rows than the room kept: the small buffers are retired, the copy is still whole.
  for (int i = 0; i < 40; ++i) s.push(some_ids(rng, 1000, 200000), nullptr);
  const auto all = s.state();
  ps_snapshot big(s.dense, s.tables, true, std::move(taken));
  while (!big.copy_some(std::chrono::hours(1))) {
  }
  auto grown = big.take();
  EXPECT_EQ(as_maps(grown.state), all);
  EXPECT_EQ(grown.retired.size(), 2u) << "rows and slots buffers, too small, left for the writer to free";
}

}  // namespace
}  // namespace troupe::actors
