// restart_blas_threads: OpenBLAS's pool threads keep the floating-point mode of the thread that
// started them (in a process, the pool starts as the library loads, before main flushes denormals);
// restarted from a thread that flushes, the pool's threads flush too. Observed through a GEMM whose
// products underflow (1e-22 * 1e-22): a thread that keeps denormals writes denormal outputs, one
// that flushes writes zeros. The outputs are read as bits: a flushing thread compares denormals as 0.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "troupe/core/float_env.hpp"
#include "troupe/nn/blas.hpp"

namespace troupe::nn {
namespace {

// Outputs of a 256x256x256 GEMM that are denormal (nonzero bits) where the thread computing them
// keeps denormals; large enough that OpenBLAS splits it over its threads.
std::size_t denormal_outputs() {
  constexpr int n = 256;
  std::vector<float> a(n * n, 1e-22f), b(n * n, 1e-22f), c(n * n, 1.f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f,
              c.data(), n);
  std::size_t nonzero = 0;
  for (float x : c) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    nonzero += (bits & 0x7fffffffu) != 0;
  }
  return nonzero;
}

TEST(blas_threads, a_pool_restarted_from_a_flushing_thread_flushes_its_denormals) {
  const int threads = openblas_get_num_threads();
  openblas_set_num_threads(2);
  ASSERT_FALSE(denormals_flushed()) << "the test's main thread keeps denormals";
  ASSERT_TRUE(restart_blas_threads()) << "Debian's OpenBLAS (pthread build) exports blas_thread_shutdown_";
  ASSERT_EQ(denormal_outputs(), std::size_t{256 * 256}) << "this thread, keeping denormals, started the pool";
  std::size_t before = 0, after = 0;
  std::thread([&] {
    flush_denormals();
    before = denormal_outputs();
    restart_blas_threads();
    after = denormal_outputs();
  }).join();
  restart_blas_threads();  // the next call starts the pool from this thread again, for the other tests
  openblas_set_num_threads(threads);
  EXPECT_GT(before, 0u) << "the pool started by a thread that keeps denormals keeps them";
  EXPECT_LT(before, std::size_t{256 * 256}) << "the flushing caller's own part of the GEMM flushes";
  EXPECT_EQ(after, 0u) << "restarted from the flushing thread, the pool flushes too";
}

}  // namespace
}  // namespace troupe::nn
