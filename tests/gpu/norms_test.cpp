// gpu::norm_reducer (the noise scale's squared norms on the device) against double sums on the host,
// at sizes below a block, across the grid's 256 blocks and past one grid-stride pass; the results
// are bitwise repeatable (replicas must read the same |mean g|^2 from the same sum).
#include <gtest/gtest.h>

#include <cmath>
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

// queue() then the caller's own sync (the step's loss readback in a worker): the same bits as the
// forms that wait, both |x|^2 alone and the pair.
TEST_F(gpu_norms, queued_norms_read_after_the_callers_sync_equal_the_waiting_forms) {
  TROUPE_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(make());
  for (auto n : sizes) {
    auto prev = random_floats(n, 4 * n);
    auto x = random_floats(n, 4 * n + 1);
    auto dprev = to_device(prev, st->get());
    auto dx = to_device(x, st->get());
    auto waited = r->sqr(dx.data(), n, st->get());
    ASSERT_TRUE(waited.has_value()) << waited.err().to_string();
    ASSERT_TRUE(r->queue(dx.data(), n, false, st->get()).has_value());
    ASSERT_TRUE(st->sync().has_value());
    EXPECT_EQ(r->queued().sqr, *waited) << n << " floats";
    EXPECT_EQ(r->queued().cross, 0.0) << "no pair queued";
    ASSERT_TRUE(r->keep(dprev.data(), n, st->get()).has_value());
    auto pair = r->with_kept(dx.data(), n, st->get());
    ASSERT_TRUE(pair.has_value()) << pair.err().to_string();
    ASSERT_TRUE(r->queue(dx.data(), n, true, st->get()).has_value());
    ASSERT_TRUE(st->sync().has_value());
    const auto q = r->queued();
    EXPECT_EQ(q.sqr, pair->sqr) << n;
    EXPECT_EQ(q.kept_sqr, pair->kept_sqr) << n;
    EXPECT_EQ(q.cross, pair->cross) << n;
  }
  EXPECT_FALSE(r->queue(nullptr, 5, true, st->get()).has_value()) << "no kept vector of 5 floats";
}

// Adam's preconditioner: w = 1 / (sqrt(v c) + eps)^2 from the second moments on the device, then
// every norm of that size weighted (and none of another size).
TEST_F(gpu_norms, preconditioned_norms_weigh_by_adams_second_moments) {
  TROUPE_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(make());
  const float c = 1.0f / (1.0f - 0.999f), eps = 1e-8f;
  for (auto n : sizes) {
    auto v = random_floats(n, 3 * n);
    for (auto& x : v) x = 1e-4f * (1.0f + 10.0f * x * x);  // positive, spread over ~10x
    auto x = random_floats(n, 3 * n + 1), prev = random_floats(n, 3 * n + 2);
    std::vector<float> w(n), xw(n), pw(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float p = std::sqrt(v[i] * c) + eps;
      w[i] = 1.0f / (p * p);
      xw[i] = x[i] * w[i];
      pw[i] = prev[i] * w[i];
    }
    auto dv = to_device(v, st->get()), dx = to_device(x, st->get()), dprev = to_device(prev, st->get());
    ASSERT_TRUE(r->precondition(dv.data(), n, {}, c, eps, 0.0f, st->get()).has_value());
    ASSERT_TRUE(r->preconditioned(n));
    auto got = r->sqr(dx.data(), n, st->get());
    ASSERT_TRUE(got.has_value()) << got.err().to_string();
    const double xx = host_dot(x, xw), pp = host_dot(prev, pw), xp = host_dot(x, pw);
    EXPECT_NEAR(*got, xx, 1e-5 * xx) << n << " floats";
    ASSERT_TRUE(r->keep(dprev.data(), n, st->get()).has_value());
    auto p = r->with_kept(dx.data(), n, st->get());
    ASSERT_TRUE(p.has_value()) << p.err().to_string();
    EXPECT_NEAR(p->sqr, xx, 1e-5 * xx) << n;
    EXPECT_NEAR(p->kept_sqr, pp, 1e-5 * pp) << n;
    EXPECT_NEAR(p->cross, xp, 1e-5 * std::sqrt(xx * pp)) << n;
    if (n > 1) {  // another size: the plain norm
      auto other = r->sqr(dx.data(), n - 1, st->get());
      ASSERT_TRUE(other.has_value());
      std::vector<float> head(x.begin(), x.end() - 1);
      EXPECT_NEAR(*other, host_dot(head, head), 1e-6 * host_dot(head, head)) << n - 1;
    }
  }
}

// Each tensor's weights floored at floor_fraction x its mean of v c (grad_norms.hpp: a coordinate
// whose v is 0 weighs as Adam bounds its step, not 1 / eps^2), the floor summed on the device; tensors
// that do not cover n floats: one tensor of n.
TEST_F(gpu_norms, preconditioned_weights_are_floored_per_tensor) {
  TROUPE_REQUIRE_GPU();
  ASSERT_NO_FATAL_FAILURE(make());
  const float c = 1.0f / (1.0f - 0.999f), eps = 1e-7f, fraction = 1.0f - 0.999f;
  const std::vector<std::size_t> split{784 * 300, 300, 300 * 10, 10}, wrong{7, 9};  // an MLP's tensors
  const std::size_t n = 784 * 300 + 300 + 300 * 10 + 10;
  auto v = random_floats(n, 11);
  for (std::size_t i = 0; i < n; ++i) v[i] = i % 50 == 3 ? 0.0f : 1e-4f * (1.0f + 10.0f * v[i] * v[i]);
  auto x = random_floats(n, 12);
  auto dv = to_device(v, st->get()), dx = to_device(x, st->get());
  for (const auto* tensors : {&split, &wrong}) {
    const std::vector<std::size_t> parts = tensors == &split ? split : std::vector<std::size_t>{n};
    std::vector<float> xw(n);
    std::size_t at = 0;
    for (auto size : parts) {
      double mean = 0;
      for (std::size_t i = at; i < at + size; ++i)
        mean += static_cast<double>(v[i]) * c / static_cast<double>(size);
      for (std::size_t i = at; i < at + size; ++i) {
        const double p = std::sqrt(std::max(static_cast<double>(v[i]) * c, fraction * mean)) + eps;
        xw[i] = static_cast<float>(x[i] / (p * p));
      }
      at += size;
    }
    ASSERT_TRUE(r->precondition(dv.data(), n, *tensors, c, eps, fraction, st->get()).has_value());
    auto got = r->sqr(dx.data(), n, st->get());
    ASSERT_TRUE(got.has_value()) << got.err().to_string();
    const double want = host_dot(x, xw);
    EXPECT_NEAR(*got, want, 1e-4 * want) << (tensors == &split ? "per tensor" : "one tensor");
    EXPECT_LT(want, 1e9) << "unbounded, 1 in 50 coordinates would weigh 1 / eps^2";
  }
}

TEST_F(gpu_norms, without_cuda_the_reducer_is_not_built) {
  if (built_with_cuda()) GTEST_SKIP() << "built with CUDA";
  auto r = norm_reducer::create();
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(r.err() == gpu_errc::not_built) << r.err().to_string();
}

}  // namespace
}  // namespace troupe::gpu
