// Test helpers: random host data, host <-> device copies that fail the test on error, and a
// comparison of float arrays with a relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "troupe/gpu/cuda.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::gpu::testing {

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  nn::rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.normal()) * scale;
  return v;
}

template <class T>
device_buffer<T> to_device(std::span<const T> host, cuda_stream s) {
  auto b = device_buffer<T>::alloc(host.size());
  EXPECT_TRUE(b.has_value()) << b.err().to_string();
  if (!b) return {};
  auto up = b->upload(host, s);
  EXPECT_TRUE(up.has_value()) << up.err().to_string();
  return std::move(*b);
}

template <class T>
device_buffer<T> to_device(const std::vector<T>& host, cuda_stream s) {
  return to_device(std::span<const T>(host), s);
}

inline device_buffer<float> zeros(std::size_t n, cuda_stream s) {
  return to_device(std::vector<float>(n, 0.0f), s);
}

// Downloads `n` floats from `p` (synchronously).
inline std::vector<float> to_host(const float* p, std::size_t n, cuda_stream s) {
  std::vector<float> out(n);
  auto r = detail::copy_to_host(out.data(), p, n * sizeof(float), s);
  EXPECT_TRUE(r.has_value()) << r.err().to_string();
  auto ok = sync_stream(s);
  EXPECT_TRUE(ok.has_value()) << ok.err().to_string();
  return out;
}

// Element-wise |got - want| <= atol + rtol * |want|; reports the first few mismatches.
inline void expect_close(std::span<const float> got, std::span<const float> want, const std::string& what,
                         float rtol = 1e-4f, float atol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << ", cpu " << want[i];
  }
}

}  // namespace troupe::gpu::testing
