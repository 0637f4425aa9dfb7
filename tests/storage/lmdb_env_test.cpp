#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "test_dir.hpp"
#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {
namespace {

using testing::temp_dir;

TEST(LmdbEnv, WriteThenReadThroughTheWriterThread) {
  temp_dir d;
  auto env = lmdb_env::open(d.str());
  ASSERT_TRUE(env) << env.err().to_string();
  auto db = (*env)->open_db("kv", MDB_CREATE);
  ASSERT_TRUE(db) << db.err().to_string();
  ASSERT_TRUE((*env)->write([&](write_txn& w) { return w.put(*db, "a", "1"); }));
  auto txn = (*env)->begin_read();
  ASSERT_TRUE(txn);
  auto v = txn->get(*db, "a");
  ASSERT_TRUE(v && *v);
  EXPECT_EQ(**v, "1");
  auto missing = txn->get(*db, "b");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(*missing);
}

TEST(LmdbEnv, SameDirectoryGivesTheSameEnvironment) {
  temp_dir d;
  auto a = lmdb_env::open(d.str());
  auto b = lmdb_env::open(d.str() + "/.");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get(), b->get());
}

TEST(LmdbEnv, GroupCommitRollsBackOnlyTheFailingFunction) {
  temp_dir d;
  env_options o;
  o.max_batch = 64;
  auto env = lmdb_env::open(d.str(), o);
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("kv", MDB_CREATE);
  ASSERT_TRUE(db);
  std::vector<std::future<expected<void>>> futures;
  for (int i = 0; i < 200; ++i) {
    futures.push_back((*env)->submit([&, i](write_txn& w) -> expected<void> {
      std::string key = "k";  // appended: "k" + to_string(i) trips GCC 12's -Wrestrict
      key += std::to_string(i);
      if (auto r = w.put(*db, key, "v"); !r) return r;
      if (i % 7 == 0) return make_unexpected(storage_errc::invalid_argument, "job " + std::to_string(i));
      return {};
    }));
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(futures[i].get().has_value(), i % 7 != 0) << i;
  auto txn = (*env)->begin_read();
  ASSERT_TRUE(txn);
  for (int i = 0; i < 200; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    auto v = txn->get(*db, key);
    ASSERT_TRUE(v);
    EXPECT_EQ(v->has_value(), i % 7 != 0) << i;
  }
}

TEST(LmdbEnv, MapGrowsOnMapFull) {
  temp_dir d;
  env_options o;
  o.initial_map_size = 256 << 10;
  auto env = lmdb_env::open(d.str(), o);
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("kv", MDB_CREATE);
  ASSERT_TRUE(db);
  std::string big(64 << 10, 'x');
  for (int i = 0; i < 64; ++i)  // 4 MiB in all, 16x the initial map
    ASSERT_TRUE((*env)->write([&](write_txn& w) { return w.put(*db, std::to_string(i), big); })) << i;
  EXPECT_GT((*env)->map_size(), std::size_t{4} << 20);
}

TEST(LmdbEnv, MapFullAtMaximumIsAnError) {
  temp_dir d;
  env_options o;
  o.initial_map_size = 256 << 10;
  o.max_map_size = 512 << 10;
  auto env = lmdb_env::open(d.str(), o);
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("kv", MDB_CREATE);
  ASSERT_TRUE(db);
  std::string big(1 << 20, 'x');
  auto r = (*env)->write([&](write_txn& w) { return w.put(*db, "k", big); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::map_full) << r.err().to_string();
}

TEST(LmdbEnv, WriteFromInsideAWriteFunctionFailsInsteadOfDeadlocking) {
  temp_dir d;
  auto env = lmdb_env::open(d.str());
  ASSERT_TRUE(env);
  expected<void> inner;
  ASSERT_TRUE((*env)->write([&](write_txn&) -> expected<void> {
    inner = (*env)->write([](write_txn&) -> expected<void> { return {}; });
    return {};
  }));
  ASSERT_FALSE(inner);
  EXPECT_EQ(inner.err(), storage_errc::invalid_argument);
}

TEST(LmdbEnv, ReadTxnMovesBetweenThreads) {
  temp_dir d;
  auto env = lmdb_env::open(d.str());
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("kv", MDB_CREATE);
  ASSERT_TRUE((*env)->write([&](write_txn& w) { return w.put(*db, "a", "1"); }));
  auto txn = (*env)->begin_read();
  ASSERT_TRUE(txn);
  read_txn moved = std::move(*txn);
  std::string got;
  std::thread([&] {
    auto v = moved.get(*db, "a");
    if (v && *v) got = std::string(**v);
  }).join();
  EXPECT_EQ(got, "1");
}

TEST(LmdbEnv, MissingDatabaseWithoutCreateIsNotFound) {
  temp_dir d;
  auto env = lmdb_env::open(d.str());
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("nope");
  ASSERT_FALSE(db);
  EXPECT_EQ(db.err(), storage_errc::not_found);
}

TEST(LmdbEnv, GarbageDataFileIsAClearError) {
  temp_dir d;
  std::ofstream(d.sub("data.mdb")) << std::string(20000, 'g');
  auto env = lmdb_env::open(d.str());
  ASSERT_FALSE(env);
  EXPECT_NE(env.err().to_string().find(d.str()), std::string::npos) << env.err().to_string();
}

TEST(LmdbEnv, TruncatedDataFileIsRefusedReadOnlyAndReadsAsZerosOtherwise) {
  temp_dir d;
  {
    auto env = lmdb_env::open(d.str());
    ASSERT_TRUE(env);
    auto db = (*env)->open_db("kv", MDB_CREATE);
    std::string big(1 << 20, 'x');
    ASSERT_TRUE((*env)->write([&](write_txn& w) { return w.put(*db, "k", big); }));
  }
  std::filesystem::resize_file(d.sub("data.mdb"), 64 << 10);
  env_options ro;
  ro.read_only = true;
  auto env = lmdb_env::open(d.str(), ro);
  ASSERT_FALSE(env);
  EXPECT_NE(env.err().to_string().find("truncated"), std::string::npos) << env.err().to_string();
  // Writable: extended with zero pages, so reading the lost value cannot SIGBUS.
  env = lmdb_env::open(d.str());
  ASSERT_TRUE(env) << env.err().to_string();
  auto db = (*env)->open_db("kv");
  if (!db) {  // the lost page was on the path to the database: a clear error
    EXPECT_NE(db.err().to_string().find("MDB_CORRUPTED"), std::string::npos) << db.err().to_string();
    return;
  }
  auto txn = (*env)->begin_read();
  ASSERT_TRUE(txn);
  auto v = txn->get(*db, "k");
  if (v && *v) {
    EXPECT_NE(**v, std::string(1 << 20, 'x'));
  }
}

TEST(LmdbEnv, ReadOnlyOpenOfMissingDirectoryFails) {
  temp_dir d;
  env_options o;
  o.read_only = true;
  auto env = lmdb_env::open(d.sub("absent"), o);
  ASSERT_FALSE(env);
  EXPECT_EQ(env.err(), storage_errc::not_found);
}

TEST(LmdbEnv, Be64KeysSortNumerically) {
  EXPECT_LT(be64_key(255), be64_key(256));
  EXPECT_EQ(from_be64(be64_key(0x0102030405060708ULL)), 0x0102030405060708ULL);
}

}  // namespace
}  // namespace troupe::storage
