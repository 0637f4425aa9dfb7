// splitmix64 is part of troupe's formats (shuffles in the task journal, dropout masks, initial
// weights, the PS shard map): its outputs are pinned here to the reference generator's.
#include "troupe/core/splitmix.hpp"

#include <gtest/gtest.h>

namespace troupe {
namespace {

// The reference stream from seed 0 (Vigna's splitmix64.c): usable at compile time.
static_assert(splitmix64(0) == 0xe220a8397b1dcdafull);

TEST(splitmix64, matches_the_reference_stream) {
  std::uint64_t state = 0;
  EXPECT_EQ(splitmix64_next(state), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64_next(state), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64_next(state), 0x06c45d188009454full);
  EXPECT_EQ(state, 3 * splitmix64_gamma);
}

TEST(splitmix64, is_a_pure_function_of_its_state) {
  EXPECT_EQ(splitmix64(12345), 0x22118258a9d111a0ull);
  EXPECT_EQ(splitmix64(12345), splitmix64(12345));
  EXPECT_NE(splitmix64(12345), splitmix64(12346));
}

}  // namespace
}  // namespace troupe
