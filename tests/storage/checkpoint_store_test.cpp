#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "checkpoint_codec.hpp"
#include "ckpt_gen.hpp"
#include "test_dir.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage {
namespace {

using testing::temp_dir;

checkpoint_options small_chunks(std::uint32_t keep_full = 0) {
  checkpoint_options o;
  o.keep_full = keep_full;
  return o;
}

std::string data_file(const std::string& dir, std::uint64_t v) {
  char name[32];
  std::snprintf(name, sizeof name, "/v%020llu.ckpt", static_cast<unsigned long long>(v));
  return dir + name;
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

// Flips a byte in the first block (a dense tensor) or the last (slot rows) of version 1's data file.
void corrupt_one(const std::string& dir, bool last) {
  std::fstream f(data_file(dir, 1), std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(f.tellg());
  const std::streamoff at = last ? size - 32 - 8 - 100 : 24 + 16 + 4 + 100;  // inside the values
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(at);
  f.write(&c, 1);
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
    EXPECT_NE(st.err().to_string().find(last ? "checksum mismatch in 'adagrad/emb' rows from"
                                             : "checksum mismatch in 'fc.w'"),
              std::string::npos)
        << st.err().to_string();
  }
}

TEST(CheckpointStore, TruncatedOrMissingDataFileIsCorrupt) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  write_versions(*s, 2);
  const auto size = std::filesystem::file_size(data_file(d.str(), 2));
  for (auto cut : {size - 1, size - 32, size / 2, std::uintmax_t{30}, std::uintmax_t{0}}) {
    std::filesystem::resize_file(data_file(d.str(), 2), cut);
    auto st = s->load(2);
    ASSERT_FALSE(st) << "cut at " << cut;
    EXPECT_EQ(st.err(), storage_errc::corrupt_checkpoint) << st.err().to_string();
  }
  std::filesystem::remove(data_file(d.str(), 1));
  auto st = s->load(1);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().to_string().find("data file missing"), std::string::npos) << st.err().to_string();
}

// A crash between a data file's rename and its header's commit, or during its write, leaves a file
// no complete version owns: open() removes it, and the versions go on from latest.
TEST(CheckpointStore, DataFilesWithoutACompleteHeaderAreRemovedAtOpen) {
  temp_dir d;
  {
    auto s = checkpoint_store::open(d.str(), small_chunks());
    ASSERT_TRUE(s);
    write_versions(*s, 2);
  }
  std::filesystem::copy_file(data_file(d.str(), 2), data_file(d.str(), 3));
  std::ofstream(data_file(d.str(), 4) + ".tmp") << "half written";
  std::ofstream(d.str() + "/notes.txt") << "not ours";
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_FALSE(std::filesystem::exists(data_file(d.str(), 3)));
  EXPECT_FALSE(std::filesystem::exists(data_file(d.str(), 4) + ".tmp"));
  EXPECT_TRUE(std::filesystem::exists(data_file(d.str(), 2)));
  EXPECT_TRUE(std::filesystem::exists(d.str() + "/notes.txt")) << "only checkpoint files are removed";
  auto v = s->write(testing::changes(3), checkpoint_kind::incremental);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, 3u);
  auto st = s->load(3);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_TRUE(*st == testing::state_at(3));
}

// Versions 1..n in the format of older builds (format 1: every value in ckpt_data, rows in packs),
// as their write() left them.
void write_format1(const std::string& dir, std::uint64_t n) {
  auto env = lmdb_env::open(dir);
  ASSERT_TRUE(env);
  auto versions = (*env)->open_db("ckpt_versions", MDB_CREATE);
  auto data = (*env)->open_db("ckpt_data", MDB_CREATE);
  auto meta = (*env)->open_db("ckpt_meta", MDB_CREATE);
  ASSERT_TRUE(versions && data && meta);
  shard_state state;
  for (std::uint64_t v = 1; v <= n; ++v) {
    auto c = testing::changes(v);
    testing::merge(state, c);
    const auto kind = testing::kind_of(v);
    const shard_state& s = kind == checkpoint_kind::full ? state : c;
    checkpoint_info info{v, kind == checkpoint_kind::full ? 0 : v - 1, kind, true, 0, 0, 1};
    ASSERT_TRUE((*env)->write([&](write_txn& w) -> expected<void> {
      auto put_dense = [&](ckpt::section sec, const dense_tensors& m) -> expected<void> {
        for (const auto& [name, vals] : m) {
          const auto k = ckpt::encode_key(v, sec, name, 0);
          std::string val(ckpt::value_size(vals.size()), '\0');
          ckpt::encode_value(k, vals, val.data());
          if (auto r = w.put(*data, k, val); !r) return r;
          ++info.entries;
          info.bytes += 4 * vals.size();
        }
        return {};
      };
      auto put_rows = [&](ckpt::section sec, const embedding_tables& m) -> expected<void> {
        for (const auto& [name, t] : m) {
          std::vector<ckpt::row_ref> rows;
          for (const auto& [id, row] : t) rows.emplace_back(id, &row);
          std::sort(rows.begin(), rows.end());
          for (std::size_t i = 0; i < rows.size(); i += 100) {  // packs of 100
            const std::size_t count = std::min<std::size_t>(100, rows.size() - i);
            const auto k = ckpt::encode_key(v, sec, name, rows[i].first);
            std::string val(ckpt::pack_size(count, testing::gen_dim), '\0');
            ckpt::encode_pack(k, rows.data() + i, count, testing::gen_dim, val.data());
            if (auto r = w.put(*data, k, val); !r) return r;
            ++info.entries;
            info.bytes += 4 * count * testing::gen_dim;
          }
        }
        return {};
      };
      for (auto r :
           {put_dense(ckpt::dense, s.dense), put_rows(ckpt::embedding, s.embeddings),
            put_dense(ckpt::dense_slot, s.dense_slots), put_rows(ckpt::embedding_slot, s.embedding_slots)})
        if (!r) return r;
      if (auto r = w.put(*versions, be64_key(v), ckpt::encode_info(info)); !r) return r;
      return w.put(*meta, "latest", be64_key(v));
    }));
  }
}

TEST(CheckpointStore, VersionsOfOlderBuildsLoadAndChainsGoOnInTheNewFormat) {
  temp_dir d;
  write_format1(d.str(), 3);
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s) << s.err().to_string();
  auto old = s->load(3);
  ASSERT_TRUE(old) << old.err().to_string();
  EXPECT_TRUE(*old == testing::state_at(3));
  // Version 4, an incremental on the old chain, is a data file; 6 a full one.
  for (std::uint64_t v = 4; v <= 7; ++v) {
    auto c = testing::changes(v);
    auto kind = testing::kind_of(v);
    auto r = s->write(kind == checkpoint_kind::full ? testing::state_at(v) : c, kind);
    ASSERT_TRUE(r) << r.err().to_string();
    ASSERT_EQ(*r, v);
    auto back = s->load(v);
    ASSERT_TRUE(back) << "version " << v << ": " << back.err().to_string();
    EXPECT_TRUE(*back == testing::state_at(v)) << "version " << v;
  }
  EXPECT_TRUE(std::filesystem::exists(data_file(d.str(), 4)));
  auto info = s->list();
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)[0].format, 1);
  EXPECT_EQ((*info)[4].format, 2);
  // Collection removes old versions of both formats.
  ASSERT_TRUE(s->collect(1));
  auto left = s->list();
  ASSERT_TRUE(left);
  EXPECT_EQ(left->front().version, 6u);
  EXPECT_FALSE(std::filesystem::exists(data_file(d.str(), 4)));
}

TEST(CheckpointStore, FlatStateRoundTrips) {
  temp_dir d;
  auto s = checkpoint_store::open(d.str(), small_chunks());
  ASSERT_TRUE(s);
  flat_state f;
  f.dense.emplace_back("w", std::vector<float>{1, 2, 3});
  f.dense_slots.emplace_back("w", std::vector<float>{4, 5});
  flat_rows rows{"t", 512, {}, {}}, slots{"t", 2, {}, {}};  // 2 KiB rows: ~4000 a block
  shard_state want;
  want.dense["w"] = {1, 2, 3};
  want.dense_slots["w"] = {4, 5};
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const std::uint64_t id = i * 0x9E3779B97F4A7C15ULL;
    rows.ids.push_back(id);
    slots.ids.push_back(id);
    std::vector<float> r(512, float(i)), g{float(i) / 2, 0.5f};
    r[7] = float(i + 7);
    rows.values.insert(rows.values.end(), r.begin(), r.end());
    slots.values.insert(slots.values.end(), g.begin(), g.end());
    want.embeddings["t"][id] = r;
    want.embedding_slots["t"][id] = g;
  }
  f.embeddings.push_back(std::move(rows));
  f.embedding_slots.push_back(std::move(slots));
  f.embeddings.push_back({"empty", 4, {}, {}});  // a table with no rows is not stored
  auto v = s->write(f, checkpoint_kind::full);
  ASSERT_TRUE(v) << v.err().to_string();
  auto info = s->list();
  ASSERT_TRUE(info);
  EXPECT_GT((*info)[0].entries, 4u) << "rows in several blocks";
  auto back = s->load(*v);
  ASSERT_TRUE(back) << back.err().to_string();
  EXPECT_TRUE(*back == want);
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
