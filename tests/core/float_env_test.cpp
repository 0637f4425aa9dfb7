// flush_denormals: on the calling thread and the threads it creates afterwards, a denormal operand
// reads as zero and a denormal result is flushed; other threads keep IEEE's gradual underflow.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <thread>

#include "troupe/core/float_env.hpp"

namespace troupe {
namespace {

// volatile: the products are computed at run time, under the thread's mode, not folded.
float times_one(float x) {
  volatile float a = x, b = 1.0f;
  return a * b;
}
float square(float x) {
  volatile float a = x;
  return a * a;
}

constexpr float denormal = std::numeric_limits<float>::denorm_min() * 1000;  // ~1.4e-42
constexpr float tiny = 1e-20f;                                               // tiny^2 = 1e-40: denormal

TEST(float_env, a_thread_that_flushes_reads_and_writes_denormals_as_zero_and_its_children_too) {
  ASSERT_NE(denormal, 0.0f);
  std::thread t([] {
    ASSERT_TRUE(flush_denormals()) << "x86-64 and aarch64 have the mode";
    EXPECT_TRUE(denormals_flushed());
    EXPECT_EQ(times_one(denormal), 0.0f) << "a denormal operand is read as zero";
    EXPECT_EQ(square(tiny), 0.0f) << "a denormal result is flushed";
    EXPECT_EQ(square(1e-10f), 1e-10f * 1e-10f) << "normal numbers are untouched";
    std::thread child([] {
      EXPECT_TRUE(denormals_flushed()) << "a thread created afterwards inherits the mode";
      EXPECT_EQ(square(tiny), 0.0f);
    });
    child.join();
  });
  t.join();
}

TEST(float_env, a_thread_that_does_not_flush_keeps_gradual_underflow) {
  std::thread t([] {
    EXPECT_FALSE(denormals_flushed()) << "the test's main thread never flushed";
    EXPECT_EQ(times_one(denormal), denormal);
    EXPECT_GT(square(tiny), 0.0f);
  });
  t.join();
}

// TROUPE_KEEP_DENORMALS=1 keeps them (each case in a thread of its own: the mode is per thread).
TEST(float_env, troupe_keep_denormals_1_keeps_them_and_anything_else_flushes) {
  auto in_thread = [](const char* value) {
    if (value)
      ::setenv("TROUPE_KEEP_DENORMALS", value, 1);
    else
      ::unsetenv("TROUPE_KEEP_DENORMALS");
    bool flushed = false, now = false;
    std::thread t([&] {
      flushed = flush_denormals_unless_kept();
      now = denormals_flushed();
    });
    t.join();
    ::unsetenv("TROUPE_KEEP_DENORMALS");
    EXPECT_EQ(flushed, now) << (value ? value : "(unset)");
    return now;
  };
  EXPECT_FALSE(in_thread("1"));
  EXPECT_TRUE(in_thread(nullptr));
  EXPECT_TRUE(in_thread("0"));
}

}  // namespace
}  // namespace troupe
