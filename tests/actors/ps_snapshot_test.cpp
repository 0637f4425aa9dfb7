// ps_snapshot: copied a slice at a time while pushes change the rows (through before_update, as
// the shard's push handler does), a snapshot holds every row as it was when it began, and the rows
// pushed meanwhile are dirty for the next checkpoint.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "roles/ps_snapshot.hpp"

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
  auto flat = snap.take();
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
  EXPECT_EQ(as_maps(snap.take()), at_start);
  std::sort(later.begin(), later.end());
  later.erase(std::unique(later.begin(), later.end()), later.end());
  EXPECT_EQ(s.t().dirty.size(), later.size()) << "rows pushed during the snapshot are dirty for the next";
}

}  // namespace
}  // namespace troupe::actors
