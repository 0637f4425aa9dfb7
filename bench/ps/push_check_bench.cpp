// What a PS shard's checks of a request cost (ps/push_checks.hpp): the finiteness test of a pushed
// gradient's floats and the id-range test of a request's ids, against the loops they replaced (an
// early-return std::isfinite loop; an early-return comparison per id), interleaved in blocks in one
// run so that both see the same load. One JSON line per size: the median microseconds per request of
// each. A ps_bench round of 1000 ids of 16 floats (a pull and a push) takes about 1 ms on the 2-core
// VM: these are the checks' share of it.
//
//   push_check_bench [--ids 1000] [--dim 16] [--blocks 31] [--reps 200]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ps/push_checks.hpp"

using namespace troupe;

namespace {

__attribute__((noinline)) bool isfinite_loop(std::span<const float> v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

__attribute__((noinline)) bool shard_all_finite(std::span<const float> v) {
  return actors::all_finite(v);
}

__attribute__((noinline)) bool ids_loop(std::span<const std::uint64_t> ids, std::uint64_t limit) {
  for (auto id : ids)
    if (id >= limit) return false;
  return true;
}

__attribute__((noinline)) bool shard_ids(std::span<const std::uint64_t> ids, std::uint64_t limit) {
  return actors::largest_id(ids) < limit;
}

// One block: `reps` calls of `f`, their mean microseconds per call appended to `blocks`.
template <typename F>
void time_block(F&& f, int reps, std::vector<double>& blocks) {
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < reps; ++i) ok += f() ? 1 : 0;
  const auto t1 = std::chrono::steady_clock::now();
  if (ok != reps) std::fprintf(stderr, "a check failed on valid input\n"), std::exit(1);
  blocks.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / reps);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t ids_n = 1000, dim = 16;
  int blocks = 31, reps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ids"))
      ids_n = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--dim"))
      dim = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--blocks"))
      blocks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else
      return std::fprintf(stderr, "unknown flag %s\n", argv[i]), 2;
  }
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.f, 1e-2f);
  std::vector<float> values(ids_n * dim);
  for (auto& v : values) v = g(rng);
  std::vector<std::uint64_t> ids(ids_n);
  const std::uint64_t limit = 1'000'002;
  for (auto& id : ids) id = rng() % limit;
  std::vector<double> old_f, new_f, old_i, new_i;
  for (int b = 0; b < blocks; ++b) {
    time_block([&] { return isfinite_loop(values); }, reps, old_f);
    time_block([&] { return shard_all_finite(values); }, reps, new_f);
    time_block([&] { return ids_loop(ids, limit); }, reps, old_i);
    time_block([&] { return shard_ids(ids, limit); }, reps, new_i);
  }
  std::printf(
      "{\"bench\":\"ps_push_checks\",\"ids\":%zu,\"floats\":%zu,\"blocks\":%d,"
      "\"finite_isfinite_loop_us\":%.3f,\"finite_shard_us\":%.3f,"
      "\"ids_early_return_us\":%.3f,\"ids_shard_us\":%.3f}\n",
      ids_n, values.size(), blocks, median(old_f), median(new_f), median(old_i), median(new_i));
  return 0;
}
