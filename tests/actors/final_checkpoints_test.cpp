// The end of an async_ps job (master/final_checkpoints.hpp): every shard is asked for a checkpoint of
// every push it applied, asked again when silent or after an error, and the job may end only once
// each said one holds them; disk faults pause (never count), other errors fail past the limit.
#include <gtest/gtest.h>

#include "master/final_checkpoints.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

TEST(final_checkpoints, every_alive_shard_is_asked_once_and_the_end_waits_for_all) {
  manual_clock clk;
  final_checkpoints f(2, 3, 10s, 2s);
  EXPECT_FALSE(f.done());
  auto asks = f.due({"ps-0"}, clk.now());  // ps-1 is not (yet) alive
  ASSERT_EQ(asks, std::vector<std::string>{"ps-0"});
  EXPECT_TRUE(f.due({"ps-0"}, clk.now()).empty()) << "asked twice at once";
  EXPECT_EQ(f.due({"ps-0", "ps-1"}, clk.now()), std::vector<std::string>{"ps-1"});
  f.answer("ps-0", "", false);
  EXPECT_FALSE(f.done());
  EXPECT_EQ(f.waiting(), "ps-1");
  f.answer("ps-9", "", false);  // no such shard: ignored
  EXPECT_FALSE(f.done());
  clk.advance(11s);  // ps-1 said nothing: asked again; ps-0 is done and is not
  EXPECT_EQ(f.due({"ps-0", "ps-1"}, clk.now()), std::vector<std::string>{"ps-1"});
  f.answer("ps-1", "", false);
  EXPECT_TRUE(f.done());
  EXPECT_TRUE(f.due({"ps-0", "ps-1"}, clk.now() + 1h).empty());
}

TEST(final_checkpoints, a_disk_fault_is_asked_again_after_the_retry_and_never_fails_the_end) {
  manual_clock clk;
  final_checkpoints f(1, 2, 10s, 2s);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(f.due({"ps-0"}, clk.now()).size(), 1u) << "try " << i;
    f.answer("ps-0", "ps-0: no space left on device: ckpt/ps-0", true);
    EXPECT_FALSE(f.failed());
    clk.advance(1s);
    EXPECT_TRUE(f.due({"ps-0"}, clk.now()).empty()) << "asked again within the retry";
    clk.advance(1s);
  }
  EXPECT_EQ(f.failures(), 0u);
  ASSERT_EQ(f.due({"ps-0"}, clk.now()).size(), 1u);
  f.answer("ps-0", "", false);
  EXPECT_TRUE(f.done());
}

TEST(final_checkpoints, other_errors_count_and_fail_past_the_limit_naming_the_last) {
  manual_clock clk;
  final_checkpoints f(1, 2, 10s, 2s);
  ASSERT_EQ(f.due({"ps-0"}, clk.now()).size(), 1u);
  f.answer("ps-0", "ps-0: checksum mismatch", false);
  EXPECT_FALSE(f.failed());
  clk.advance(2s);
  ASSERT_EQ(f.due({"ps-0"}, clk.now()).size(), 1u);
  f.answer("ps-0", "ps-0: permission denied", false);
  EXPECT_TRUE(f.failed());
  EXPECT_EQ(f.last_error(), "ps-0: permission denied");
  EXPECT_FALSE(f.done());
}

}  // namespace
}  // namespace troupe::actors
