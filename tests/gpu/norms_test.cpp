// gpu::norm_reducer (the noise scale's squared norms on the device) against double sums on the host,
// at sizes below a block, across the grid's 256 blocks and past one grid-stride pass; the results
// are bitwise repeatable (replicas must read the same |mean g|^2 from the same sum).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "gpu_harness.hpp"
#include "gpu_skip.hpp"
#include "troupe/gpu/norms.hpp"

namespace troupe::gpu {
namespace {

using testing::random_floats;
using testing::to_device;

const std::vector<std::size_t> sizes{1, 255, 257, 65536 + 3, 235146, (1u << 20) + 17};

double host_dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// A stream and a reducer on the device (make(): after TROUPE_REQUIRE_GPU, in the tests that need one).
class gpu_norms : public ::testing::Test {
 protected:
  void make() {
    auto s = stream::create();
    ASSERT_TRUE(s.has_value());
    st.emplace(std::move(*s));
    auto red = norm_reducer::create();
    ASSERT_TRUE(red.has_value()) << red.err().to_string();
    r.emplace(std::move(*red));
  }
  std::optional<stream> st;
  std::optional<norm_reducer> r;
};

TEST_F(gpu_norms, sqr_matches_a_double_sum_on_the_host_and_repeats_bitwise) {
  TROUPE_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(make());
  for (auto n : sizes) {
    auto x = random_floats(n, n);
    auto d = to_device(x, st->get());
    auto got = r->sqr(d.data(), n, st->get());
    ASSERT_TRUE(got.has_value()) << got.err().to_string();
    const double want = host_dot(x, x);
    EXPECT_NEAR(*got, want, 1e-6 * want) << n << " floats";
    auto again = r->sqr(d.data(), n, st->get());
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*got, *again) << "not deterministic at " << n << " floats";
  }
  auto none = r->sqr(nullptr, 0, st->get());
  ASSERT_TRUE(none.has_value()) << none.err().to_string();
  EXPECT_EQ(*none, 0.0);
}

TEST_F(gpu_norms, pair_with_the_kept_vector_matches_the_host) {
  TROUPE_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(make());
  for (auto n : sizes) {
    auto prev = random_floats(n, 2 * n);
    auto x = random_floats(n, 2 * n + 1);
    for (std::size_t i = 0; i < n; i += 3) x[i] = prev[i];  // correlated: g.g' well away from 0
    auto dprev = to_device(prev, st->get());
    auto dx = to_device(x, st->get());
    EXPECT_FALSE(r->has_kept(n)) << "a kept vector of another size";
    ASSERT_TRUE(r->keep(dprev.data(), n, st->get()).has_value());
    ASSERT_TRUE(r->has_kept(n));
    auto p = r->with_kept(dx.data(), n, st->get());
    ASSERT_TRUE(p.has_value()) << p.err().to_string();
    const double xx = host_dot(x, x), pp = host_dot(prev, prev), xp = host_dot(x, prev);
    EXPECT_NEAR(p->sqr, xx, 1e-6 * xx) << n;
    EXPECT_NEAR(p->kept_sqr, pp, 1e-6 * pp) << n;
    EXPECT_NEAR(p->cross, xp, 1e-6 * std::sqrt(xx * pp)) << n;
  }
  EXPECT_FALSE(r->with_kept(nullptr, 5, st->get()).has_value()) << "no kept vector of 5 floats";
}

TEST_F(gpu_norms, without_cuda_the_reducer_is_not_built) {
  if (built_with_cuda()) GTEST_SKIP() << "built with CUDA";
  auto r = norm_reducer::create();
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.err() == gpu_errc::not_built) << r.err().to_string();
}

}  // namespace
}  // namespace troupe::gpu
