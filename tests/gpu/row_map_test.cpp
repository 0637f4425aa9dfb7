#include "troupe/gpu/row_map.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace troupe::gpu {
namespace {

TEST(gpu_row_map, assigns_rows_in_first_sight_order_and_lists_distinct_ids) {
  row_map m;
  std::vector<std::uint64_t> ids{7, 3, 7, 9, 3, 3};
  m.map_batch(ids);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.occurrence_rows(), (std::vector<std::int32_t>{0, 1, 0, 2, 1, 1}));
  EXPECT_EQ(m.occurrence_unique(), (std::vector<std::int32_t>{0, 1, 0, 2, 1, 1}));
  EXPECT_EQ(m.unique_ids(), (std::vector<std::uint64_t>{7, 3, 9}));
  EXPECT_EQ(m.unique_rows(), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(m.new_ids(), (std::vector<std::uint64_t>{7, 3, 9}));
  EXPECT_EQ(m.new_rows(), (std::vector<std::int32_t>{0, 1, 2}));
}

TEST(gpu_row_map, later_batches_reuse_rows_and_add_only_new_ids) {
  row_map m;
  std::vector<std::uint64_t> first{7, 3, 9};
  m.map_batch(first);
  std::vector<std::uint64_t> second{9, 42, 9, 7, 100};
  m.map_batch(second);
  EXPECT_EQ(m.size(), 5u);
  // Rows are the table's; unique slots are per batch.
  EXPECT_EQ(m.occurrence_rows(), (std::vector<std::int32_t>{2, 3, 2, 0, 4}));
  EXPECT_EQ(m.occurrence_unique(), (std::vector<std::int32_t>{0, 1, 0, 2, 3}));
  EXPECT_EQ(m.unique_ids(), (std::vector<std::uint64_t>{9, 42, 7, 100}));
  EXPECT_EQ(m.unique_rows(), (std::vector<std::int32_t>{2, 3, 0, 4}));
  EXPECT_EQ(m.new_ids(), (std::vector<std::uint64_t>{42, 100}));
  EXPECT_EQ(m.new_rows(), (std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(m.find(42), 3);
  EXPECT_EQ(m.find(5), -1);
}

TEST(gpu_row_map, empty_batch_and_clear) {
  row_map m;
  m.map_batch({});
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.occurrence_rows().empty());
  std::vector<std::uint64_t> ids{1, 2};
  m.map_batch(ids);
  std::size_t seen = 0;
  m.for_each([&](std::uint64_t id, std::int32_t row) {
    EXPECT_EQ(static_cast<std::uint64_t>(row) + 1, id);
    ++seen;
  });
  EXPECT_EQ(seen, 2u);
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(1), -1);
  m.map_batch(ids);
  EXPECT_EQ(m.new_ids().size(), 2u);
}

}  // namespace
}  // namespace troupe::gpu
