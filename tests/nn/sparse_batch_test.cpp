// nn::sparse_batch: a batch's embedding rows gathered once per distinct id, and their gradient
// summed per id, against a plain map (distinct ids in order of first appearance, each sum the first
// occurrence's row plus the later ones in batch order, bit for bit).
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <unordered_map>
#include <vector>

#include "troupe/nn/sparse_batch.hpp"

namespace troupe::nn {
namespace {

// The reference: the per-id sums a std::unordered_map gives.
sparse_grad plain_sums(const std::vector<std::uint64_t>& ids, const std::vector<float>& rows,
                       std::size_t dim) {
  sparse_grad want;
  want.dim = dim;
  std::unordered_map<std::uint64_t, std::size_t> at;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto [it, added] = at.try_emplace(ids[i], want.ids.size());
    if (added) {
      want.ids.push_back(ids[i]);
      want.rows.insert(want.rows.end(), rows.begin() + static_cast<std::ptrdiff_t>(i * dim),
                       rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
    } else {
      for (std::size_t k = 0; k < dim; ++k) want.rows[it->second * dim + k] += rows[i * dim + k];
    }
  }
  return want;
}

TEST(sparse_batch, sums_equal_ids) {
  embedding_table table("t", 2, 1);
  sparse_batch batch;
  std::vector<std::uint64_t> ids{3, 9, 3, 3};
  std::vector<float> gathered(8), rows{1, 1, 2, 2, 3, 3, 4, 4};
  batch.gather(ids, table, gathered.data());
  sparse_grad out;
  batch.combine(rows.data(), 2, out);
  ASSERT_EQ(out.ids, (std::vector<std::uint64_t>{3, 9}));
  EXPECT_EQ(out.rows, (std::vector<float>{8, 8, 2, 2}));
}

// The id table reused step after step (stamps, not clears), batches of growing and shrinking size,
// ids colliding in the hash's bits: each step's rows are the table's and its sums the plain map's.
TEST(sparse_batch, reused_across_steps_equals_a_plain_map) {
  std::mt19937_64 rng(9);
  std::deque<embedding_table> tables;  // tables are not moved
  for (std::size_t dim = 1; dim <= 4; ++dim) tables.emplace_back("t", dim, 7);
  sparse_batch batch;
  sparse_grad out;
  for (int step = 0; step < 300; ++step) {
    const std::size_t n = 1 + rng() % (step % 50 == 0 ? 5000 : 300), dim = 1 + step % 4;
    std::vector<std::uint64_t> ids(n);
    for (auto& id : ids) id = step % 3 == 0 ? (rng() % 64) << 44 : rng() % (n / 2 + 1);
    std::vector<float> gathered(n * dim), rows(n * dim);
    batch.gather(ids, tables[dim - 1], gathered.data());
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < dim; ++k)
        ASSERT_EQ(gathered[i * dim + k], tables[dim - 1].row(ids[i])[k]) << step;
    ASSERT_TRUE(batch.gathered(ids));
    for (auto& v : rows) v = static_cast<float>(rng() % 1000) / 7.0f;
    batch.combine(rows.data(), dim, out);
    const sparse_grad want = plain_sums(ids, rows, dim);
    ASSERT_EQ(out.dim, dim);
    ASSERT_EQ(out.ids, want.ids) << "step " << step << ": distinct ids in order of first appearance";
    ASSERT_EQ(out.rows, want.rows) << "step " << step << ": the same sums, bit for bit";
    ASSERT_EQ(std::vector<std::uint64_t>(batch.distinct().begin(), batch.distinct().end()), want.ids);
  }
}

TEST(sparse_batch, gathered_tells_another_batch_apart) {
  embedding_table table("t", 2, 1);
  sparse_batch batch;
  std::vector<std::uint64_t> ids{4, 5, 4}, other{4, 5, 6}, shorter{4, 5};
  std::vector<float> out(6);
  batch.gather(ids, table, out.data());
  EXPECT_TRUE(batch.gathered(ids));
  EXPECT_FALSE(batch.gathered(other));
  EXPECT_FALSE(batch.gathered(shorter));
}

TEST(sparse_batch, creates_missing_rows_as_the_table_does) {
  embedding_table table("t", 4, 3), reference("t", 4, 3);
  sparse_batch batch;
  std::vector<std::uint64_t> ids{5, 9, 5, 12};
  std::vector<float> out(16);
  batch.gather(ids, table, out.data());
  EXPECT_EQ(table.size(), 3u);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t d = 0; d < 4; ++d) EXPECT_EQ(out[i * 4 + d], reference.row(ids[i])[d]);
}

}  // namespace
}  // namespace troupe::nn
