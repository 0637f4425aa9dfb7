// What a PS shard checks of every pull and push before it touches a row (ps_shard.cpp), as loops
// without a branch: run over every id and float of every request, they are on the shard's hot path.
// bench/ps/push_check_bench measures them against the early-return std::isfinite loop they replaced.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>

namespace troupe::actors {

// Whether no value is NaN or infinite: an OR over every value's "exponent all ones" test, which the
// compiler vectorizes (a loop of std::isfinite with an early return it does not).
inline bool all_finite(std::span<const float> v) {
  std::uint32_t bad = 0;
  for (float x : v) {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    bad |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// The largest of `ids` (0 for none): one comparison against the id space for the whole request.
inline std::uint64_t largest_id(std::span<const std::uint64_t> ids) {
  std::uint64_t top = 0;
  for (auto id : ids) top = std::max(top, id);
  return top;
}

}  // namespace troupe::actors
