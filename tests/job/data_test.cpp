#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "disk_faults.hpp"
#include "troupe/job/data.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::actors {
namespace {

std::string temp(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("troupe-actors-data-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p.parent_path());
  return p.string();
}

nn::dataset small_dataset(std::size_t rows) {
  nn::dataset d;
  d.info.name = "t";
  d.info.dense_dim = 3;
  d.info.sparse_fields = 2;
  d.info.num_classes = 2;
  d.info.buckets_per_field = 100;
  d.rows = rows;
  for (std::size_t i = 0; i < rows; ++i) {
    for (int k = 0; k < 3; ++k) d.dense.push_back(static_cast<float>(i * 3 + k));
    d.sparse.push_back(i % 100);
    d.sparse.push_back(100 + (i * 7) % 100);
    d.labels.push_back(static_cast<float>(i % 2));
  }
  return d;
}

TEST(data, write_then_read_a_task_range) {
  auto dir = temp("store");
  auto d = small_dataset(1000);
  auto m = job::write_dataset(d, dir, "test");
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->record_count, 1000u);
  auto store = storage::record_store::open(dir);
  ASSERT_TRUE(store);
  nn::dataset part;
  ASSERT_TRUE(job::read_records(*store, 990, 50, part));  // clipped at the end of the store
  EXPECT_EQ(part.rows, 10u);
  EXPECT_EQ(part.info.dense_dim, 3u);
  EXPECT_FLOAT_EQ(part.dense[0], 990.f * 3);
  EXPECT_EQ(part.sparse[1], 100u + (990u * 7) % 100);
  auto all = job::read_all(*store);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->labels, d.labels);
  EXPECT_EQ(all->sparse, d.sparse);
}

// A store the disk cannot hold is taken away whole (its half-written data.mdb held the disk full,
// and a second run said the directory "already holds a store").
TEST(data, a_store_the_disk_cannot_hold_is_not_left_half_written) {
  auto base = temp("full");
  std::filesystem::create_directories(base);
  test_util::small_tmpfs fs(base, "1m");
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  auto m = job::write_dataset(small_dataset(100000), base + "/store", "test");
  ASSERT_FALSE(m) << "100000 rows in 1 MiB?";
  EXPECT_EQ(m.err(), storage::storage_errc::disk_full) << m.err().to_string();
  EXPECT_FALSE(std::filesystem::exists(base + "/store"));
  EXPECT_TRUE(job::write_dataset(small_dataset(100), base + "/store", "test"))
      << "there is room for a small one";
}

TEST(data, prepare_imports_once_and_reuses) {
  auto cache = temp("cache");
  nn::data_config c;
  c.source = "synthetic-ctr";
  c.synthetic.rows = 2000;
  c.synthetic.fields = 4;
  c.synthetic.vocab_per_field = 20;
  c.test_rows = 500;
  auto a = job::prepare_datasets(c, cache);
  ASSERT_TRUE(a) << a.err().to_string();
  EXPECT_FALSE(a->reused);
  EXPECT_GT(a->true_auc, 0.5);
  auto b = job::prepare_datasets(c, cache);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->reused);
  EXPECT_EQ(a->train_dir, b->train_dir);
  EXPECT_DOUBLE_EQ(a->true_auc, b->true_auc);
  c.synthetic.rows = 3000;  // another configuration, another entry
  auto other = job::prepare_datasets(c, cache);
  ASSERT_TRUE(other);
  EXPECT_NE(other->train_dir, a->train_dir);
}

TEST(data, bad_source_is_an_error_not_a_crash) {
  nn::data_config c;
  c.source = "fashion-mnist";
  c.dir = "/nonexistent/fashion";
  auto r = job::prepare_datasets(c, temp("bad"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("/nonexistent/fashion"), std::string::npos) << r.err().to_string();
}

}  // namespace
}  // namespace troupe::actors
