#include <gtest/gtest.h>

#include <set>

#include "troupe/core/ids.hpp"

namespace troupe {
namespace {

TEST(node_id, formats_and_parses) {
  node_id id{"worker-3", 2};
  EXPECT_EQ(id.to_string(), "worker-3#2");
  auto back = node_id::parse("worker-3#2");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, id);
  auto bare = node_id::parse("master");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->incarnation, 0u);
}

TEST(node_id, rejects_bad_text_with_reason) {
  for (const char* bad : {"", "Worker", "3worker", "w#", "w#x", "w#-1", "w#1x", "a b", "w/1"}) {
    auto r = node_id::parse(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.err().context().find(bad), std::string::npos);
    }
  }
  EXPECT_FALSE(node_id::parse(std::string(65, 'a')));
}

TEST(node_id, incarnations_order) {
  node_id a{"ps-1", 1}, b{"ps-1", 2};
  EXPECT_LT(a, b);
  EXPECT_NE(a, b);
}

TEST(actor_address, names) {
  EXPECT_TRUE(valid_actor_name("ps/3"));
  EXPECT_FALSE(valid_actor_name("/ps"));
  actor_address a{{"worker-7", 1}, "worker/7"};
  EXPECT_EQ(a.to_string(), "worker/7@worker-7#1");
}

TEST(job_id, random_hex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto id = make_job_id();
    EXPECT_EQ(id.size(), 16u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace troupe
