// The BLAS pool's floating-point mode: a GEMM whose products underflow (1e-22 * 1e-22 = 1e-44, a
// denormal), timed on OpenBLAS's threads as a process finds them at main (started as the library
// loaded, keeping denormals, while main flushes: troupe before nn::restart_blas_threads) and after the
// restart (every thread flushing), with a GEMM of ordinary values alongside. Prints one JSON line per
// case: best and median milliseconds over ROUNDS, and the outputs left denormal.
//   nn_blas_pool_bench [N=256] [ROUNDS=30]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "troupe/core/float_env.hpp"
#include "troupe/nn/blas.hpp"

namespace {

void gemm_case(const char* pool, const char* values, float v, int n, int rounds) {
  std::vector<float> a(std::size_t(n) * n, v), b(a.size(), v), c(a.size(), 0.f);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f,
                c.data(), n);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::size_t denormal = 0;
  for (float x : c) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    denormal += (bits & 0x7f800000u) == 0 && (bits & 0x7fffffu) != 0;
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "{\"pool\":\"%s\",\"values\":\"%s\",\"n\":%d,\"threads\":%d,\"best_ms\":%.3f,\"median_ms\":%.3f,"
      "\"denormal_outputs\":%zu}\n",
      pool, values, n, openblas_get_num_threads(), ms.front(), ms[ms.size() / 2], denormal);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  troupe::flush_denormals();  // main flushes; the pool, started before main, does not
  gemm_case("started before main", "1e-22", 1e-22f, n, rounds);
  gemm_case("started before main", "1", 1.f, n, rounds);
  troupe::nn::restart_blas_threads();
  gemm_case("restarted from main", "1e-22", 1e-22f, n, rounds);
  gemm_case("restarted from main", "1", 1.f, n, rounds);
}
