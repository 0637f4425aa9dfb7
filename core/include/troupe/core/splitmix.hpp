// splitmix64 (Steele, Lea and Flood, 2014): the one 64-bit mixer troupe uses everywhere a value
// must be a reproducible function of a seed or id: nn's initial weights, dropout masks and shuffles
// (bit for bit the same on the CPU and in the CUDA kernels), the task journal's shuffle, the
// parameter-server shard of an embedding row. Changing it changes trained models, shuffles on disk
// and shard layouts: do not.
//
// Usable from host C++ and from CUDA device code: compiled by nvcc, the functions are
// __host__ __device__. Header-only, no dependencies.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe {

// The golden-ratio increment between consecutive states of a splitmix64 stream.
inline constexpr std::uint64_t splitmix64_gamma = 0x9e3779b97f4a7c15ull;

// The output for state `x`: (x + gamma), mixed. A pure function, a good 64-bit hash of x.
TROUPE_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The stream form: returns splitmix64(state) and advances `state` by gamma.
TROUPE_HOST_DEVICE constexpr std::uint64_t splitmix64_next(std::uint64_t& state) {
  const std::uint64_t out = splitmix64(state);
  state += splitmix64_gamma;
  return out;
}

}  // namespace troupe
