// Deterministic randomness. Everything in nn that is random (initial weights, lazily created
// embedding rows, dropout masks, shuffles, synthetic data) derives from a seed through these
// functions, so a run is reproducible and a parameter-server shard can recreate a row from
// (table seed, id) without talking to anyone.
#pragma once

#include <cmath>
#include <cstdint>

#include "troupe/core/splitmix.hpp"

namespace troupe::nn {

using troupe::splitmix64;

// A hash of (seed, a, b) with good avalanche, the basis of the "hashed" draws below.
inline std::uint64_t mix3(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ (b * 0xd6e8feb86659fd93ull));
}

// Uniform in (0, 1), a pure function of (seed, a, b).
inline double hashed_uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  return (static_cast<double>(mix3(seed, a, b) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal (Box-Muller), a pure function of (seed, a, b).
inline double hashed_normal(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  double u1 = hashed_uniform(seed, a, 2 * b), u2 = hashed_uniform(seed, a, 2 * b + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A small, fast sequential generator (splitmix64 stream).
class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_++ * splitmix64_gamma + 1); }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float uniform_f() { return static_cast<float>(uniform()); }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }

 private:
  std::uint64_t state_;
};

}  // namespace troupe::nn
