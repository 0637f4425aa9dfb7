// Corrupt record stores: found before anyone trains on them, in a child process (LMDB may abort
// on a corrupt page), rebuilt when they are a cache entry, refused by name when the user named them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "disk_faults.hpp"
#include "troupe/job/data.hpp"

namespace troupe::actors {
namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) {
  auto p = fs::temp_directory_path() / ("troupe-actors-verify-" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

nn::data_config small_ctr() {
  nn::data_config c;
  c.source = "synthetic-ctr";
  c.synthetic.rows = 3000;
  c.synthetic.fields = 4;
  c.synthetic.vocab_per_field = 20;
  c.test_rows = 500;
  return c;
}

using test_util::corrupt_middle_pages;

TEST(data_verify, a_corrupt_store_is_found_without_crashing_the_caller) {
  auto cache = temp("cache");
  auto p = job::prepare_datasets(small_ctr(), cache);
  ASSERT_TRUE(p) << p.err().to_string();
  EXPECT_TRUE(job::verify_store(p->train_dir));
  corrupt_middle_pages(p->train_dir);
  auto v = job::verify_store(p->train_dir);
  ASSERT_FALSE(v);
  EXPECT_NE(v.err().to_string().find(p->train_dir + "/data.mdb"), std::string::npos) << v.err().to_string();
}

TEST(data_verify, a_corrupt_cache_entry_is_rebuilt) {
  auto cache = temp("rebuild");
  auto a = job::prepare_datasets(small_ctr(), cache);
  ASSERT_TRUE(a) << a.err().to_string();
  corrupt_middle_pages(a->train_dir);
  auto b = job::prepare_datasets(small_ctr(), cache);
  ASSERT_TRUE(b) << b.err().to_string();
  EXPECT_FALSE(b->reused);
  EXPECT_EQ(b->train_dir, a->train_dir);
  EXPECT_TRUE(job::verify_store(b->train_dir));
  auto c = job::prepare_datasets(small_ctr(), cache);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->reused);
}

TEST(data_verify, a_named_store_is_used_in_place_and_refused_when_corrupt) {
  auto p = job::prepare_datasets(small_ctr(), temp("named"));
  ASSERT_TRUE(p) << p.err().to_string();
  nn::data_config c;
  c.source = "store";
  c.train_path = p->train_dir;
  c.test_path = p->test_dir;
  auto ok = job::prepare_datasets(c, temp("unused"));
  ASSERT_TRUE(ok) << ok.err().to_string();
  EXPECT_EQ(ok->train_dir, p->train_dir);
  corrupt_middle_pages(p->test_dir);
  auto bad = job::prepare_datasets(c, temp("unused"));
  ASSERT_FALSE(bad);
  auto text = bad.err().to_string();
  EXPECT_NE(text.find("data.test"), std::string::npos) << text;
  EXPECT_NE(text.find(p->test_dir + "/data.mdb"), std::string::npos) << text;
  EXPECT_NE(text.find("troupe data import"), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::actors
