#include <gtest/gtest.h>

#include "troupe/nn/tensor.hpp"

namespace troupe::nn {
namespace {

TEST(tensor, shapes_batch_and_print) {
  shape s{1, 28, 28};
  EXPECT_EQ(s.rank(), 3u);
  EXPECT_EQ(s.size(), 784u);
  EXPECT_EQ(s.batched(64), (shape{64, 1, 28, 28}));
  EXPECT_EQ(s.batched(64).example(), s);
  EXPECT_EQ(s.to_string(), "[1, 28, 28]");
  EXPECT_EQ(shape{}.size(), 1u);
}

TEST(tensor, resize_keeps_the_allocation_when_it_fits) {
  tensor t(shape{64, 256});
  const float* before = t.data();
  t.resize(shape{10, 256});  // a smaller last batch
  EXPECT_EQ(t.data(), before);
  EXPECT_EQ(t.size(), 2560u);
  EXPECT_EQ(t.row_size(), 256u);
  t.resize(shape{64, 256});
  EXPECT_EQ(t.data(), before);
}

TEST(tensor, views_alias_and_copies_own) {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  tensor v = tensor::view(buf.data(), shape{2, 3});
  EXPECT_TRUE(v.is_view());
  v[4] = 50;
  EXPECT_EQ(buf[4], 50);
  tensor c = v;  // a copy owns its data
  EXPECT_FALSE(c.is_view());
  c[0] = 10;
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(c.dims(), v.dims());
  c.fill(2);
  for (float x : c) EXPECT_EQ(x, 2);
}

}  // namespace
}  // namespace troupe::nn
