#include <gtest/gtest.h>

#include "ckpt_gen.hpp"
#include "test_dir.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage {
namespace {

using testing::temp_dir;

checkpoint_options small_chunks(std::uint32_t keep_full = 0) {
  checkpoint_options o;
  o.chunk_bytes = 32 << 10;
  o.keep_full = keep_full;
  return o;
}

// Writes versions 1..n as ckpt_gen says (full every fifth).
void write_versions(checkpoint_store& s, std::uint64_t n) {
  shard_state state;
  for (std::uint64_t v = 1; v <= n; ++v) {
    auto c = testing::changes(v);
    testing::merge(state, c);
    auto kind = testing::kind_of(v);
    auto r = s.write(kind == checkpoint_kind::full ? state : c, kind);
    ASSERT_TRUE(r) << r.err().to_string();
    ASSERT_EQ(*r, v);
  }
}

TEST(CheckpointStore, FullRoundTripAcrossManyTransactions) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s) << s.err().to_string();
  auto none = s->load_latest();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err(), storage_errc::not_found);
  auto state = testing::state_at(1);
  auto v = s->write(state, checkpoint_kind::full);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, 1u);
  auto back = s->load_latest();
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_TRUE(*back == state);
  auto info = s->list();
  ASSERT_TRUE(info);
  ASSERT_EQ(info->size(), 1u);
  EXPECT_EQ((*info)[0].bytes,
            4 * (testing::gen_dense + testing::gen_dense / 4 + 2 * testing::gen_rows * testing::gen_dim));
  EXPECT_LT((*info)[0].entries, 2 + 2 * testing::gen_rows) << "rows travel in packs";
}

TEST(CheckpointStore, IncrementalChainsLoadToTheFullState) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  write_versions(*s, 9);
  for (std::uint64_t v : {1, 3, 5, 6, 9}) {
    auto st = s->load(v);
    ASSERT_TRUE(st) << v << ": " << st.err().to_string();
    EXPECT_TRUE(*st == testing::state_at(v)) << v;
  }
  auto info = s->list();
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)[5].kind, checkpoint_kind::full);
  EXPECT_EQ((*info)[7].parent, 7u);
}

TEST(CheckpointStore, IncrementalWithoutAFullFails) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  auto r = s->write(testing::changes(2), checkpoint_kind::incremental);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::not_found);
  auto l = s->latest();
  ASSERT_TRUE(l);
  EXPECT_FALSE(*l);
}

TEST(CheckpointStore, CollectionKeepsTheNewestFullChains) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks(2));
  ASSERT_TRUE(s);
  write_versions(*s, 17);  // fulls at 1, 6, 11, 16
  auto info = s->list();
  ASSERT_TRUE(info);
  ASSERT_FALSE(info->empty());
  EXPECT_EQ(info->front().version, 11u) << "chains of 11 and 16 kept";
  EXPECT_EQ(info->back().version, 17u);
  auto st = s->load_latest();
  ASSERT_TRUE(st);
  EXPECT_TRUE(*st == testing::state_at(17));
  auto gone = s->load(3);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.err(), storage_errc::not_found);
}

TEST(CheckpointStore, InterruptedWriteLeavesLatestAloneAndIsRemovedAtOpen) {
  temp_dir d;
  {
    auto s = checkpoint_store::open(d.str(), small_chunks());
    ASSERT_TRUE(s);
    write_versions(*s, 2);
    // Simulate a crash mid-write: a header without completion and some data under version 3.
    auto env = lmdb_env::open(d.str());
    auto versions = (*env)->open_db("ckpt_versions");
    auto data = (*env)->open_db("ckpt_data");
    ASSERT_TRUE(versions && data);
    ASSERT_TRUE((*env)->write([&](write_txn& w) -> expected<void> {
      std::string hdr;
      {
        auto txn = w.get(*versions, be64_key(2));
        hdr = std::string(**txn);
      }
      hdr[1] = 3;              // version field (little-endian u64 after the format byte)
      hdr[1 + 8 + 8 + 1] = 0;  // complete = false
      if (auto r = w.put(*versions, be64_key(3), hdr); !r) return r;
      return w.put(*data, be64_key(3) + std::string(12, 'z'), "junk");
    }));
    auto l = s->latest();
    ASSERT_TRUE(l && *l);
    EXPECT_EQ(**l, 2u);
    auto partial = s->load(3);
    ASSERT_FALSE(partial);
  }
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  auto info = s->list();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->size(), 2u);
  auto v = s->write(testing::changes(3), checkpoint_kind::incremental);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, 3u);
  auto st = s->load(3);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_TRUE(*st == testing::state_at(3));
}

// Flips a byte in the first (a dense tensor) or last (a pack of slot rows) value of version 1.
void corrupt_one(const std::string& dir, bool last) {
  auto env = lmdb_env::open(dir);
  auto data = (*env)->open_db("ckpt_data");
  ASSERT_TRUE(data);
  ASSERT_TRUE((*env)->write([&](write_txn& w) -> expected<void> {
    auto c = cursor::open(w.raw(), *data, "t");
    if (!c) return c.err();
    (void)(last ? c->last() : c->first());
    std::string k(c->key()), v(c->value());
    v[v.size() / 2] ^= 0x10;
    return w.put(*data, k, v);
  }));
}

TEST(CheckpointStore, CorruptValueIsDetected) {
  for (bool last : {false, true}) {
    temp_dir d;
    auto s = checkpoint_store::open(d.str(), small_chunks());
    ASSERT_TRUE(s);
    write_versions(*s, 1);
    corrupt_one(d.str(), last);
    auto st = s->load(1);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.err(), storage_errc::corrupt_checkpoint);
    EXPECT_NE(st.err().to_string().find(last ? "'adagrad/emb' rows from" : "'fc.w' row 0"), std::string::npos)
        << st.err().to_string();
  }
}

TEST(CheckpointStore, RowsOfMixedWidthAndEmptyTensorsRoundTrip) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  shard_state st;
  st.dense["empty"] = {};
  st.dense["b"] = {1, 2, 3};
  for (std::uint64_t id = 0; id < 5000; ++id)
    st.embeddings["t"][id * 977 + (id % 3 == 0 ? 1ull << 63 : 0)] = std::vector<float>(1 + id % 3, float(id));
  st.embedding_slots["m/t"][7] = {0.5f};
  ASSERT_TRUE(s->write(st, checkpoint_kind::full));
  auto back = s->load_latest();
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_TRUE(*back == st);
}

TEST(CheckpointStore, StateSurvivesReopen) {
  temp_dir d;
  {
    auto s = checkpoint_store::open(d.str(), small_chunks());
    ASSERT_TRUE(s);
    write_versions(*s, 4);
  }
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  auto st = s->load_latest();
  ASSERT_TRUE(st);
  EXPECT_TRUE(*st == testing::state_at(4));
}

}  // namespace
}  // namespace troupe::storage
