// Which shard owns what: dense tensors by a hash of their name, embedding rows by a hash of their
// id (so hot ids of one field spread over the shards). Workers and shards must agree; both use
// these functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "troupe/core/splitmix.hpp"

namespace troupe::wire {

inline std::uint32_t shard_of_id(std::uint64_t id, std::uint32_t shards) {
  return static_cast<std::uint32_t>(splitmix64(id) % shards);
}
inline std::uint32_t shard_of_name(std::string_view name, std::uint32_t shards) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<std::uint32_t>(splitmix64(h) % shards);
}

}  // namespace troupe::wire
