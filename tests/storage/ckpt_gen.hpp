// Deterministic checkpoint contents for the checkpoint tests: the state after step v is the
// merge of changes(1..v); step 1 creates every row, later steps rewrite the dense tensors and a
// few embedding rows. Version v of the store must hold exactly state_at(v).
#pragma once

#include <cstdint>

#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage::testing {

inline constexpr std::uint64_t gen_rows = 3000, gen_dim = 16, gen_dense = 16384, gen_changed = 100;

inline float gen_value(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  return static_cast<float>((a * 2654435761u + b * 40503u + c) % 100000) * 1e-3f;
}

inline shard_state changes(std::uint64_t step) {
  shard_state s;
  auto& w = s.dense["fc.w"];
  auto& m = s.dense_slots["adam.m/fc.w"];
  for (std::uint64_t i = 0; i < gen_dense; ++i) {
    w.push_back(gen_value(step, i, 1));
    if (i < gen_dense / 4) m.push_back(gen_value(step, i, 2));
  }
  auto row = [&](std::uint64_t r) {
    auto& e = s.embeddings["emb"][r];
    auto& g = s.embedding_slots["adagrad/emb"][r];
    for (std::uint64_t k = 0; k < gen_dim; ++k) {
      e.push_back(gen_value(step, r, k));
      g.push_back(gen_value(r, step, k));
    }
  };
  if (step == 1)
    for (std::uint64_t r = 0; r < gen_rows; ++r) row(r);
  else
    for (std::uint64_t k = 0; k < gen_changed; ++k) row((step * 7919 + k * 104729) % gen_rows);
  return s;
}

inline void merge(shard_state& into, const shard_state& c) {
  for (auto& [n, v] : c.dense) into.dense[n] = v;
  for (auto& [n, v] : c.dense_slots) into.dense_slots[n] = v;
  for (auto& [n, t] : c.embeddings)
    for (auto& [id, row] : t) into.embeddings[n][id] = row;
  for (auto& [n, t] : c.embedding_slots)
    for (auto& [id, row] : t) into.embedding_slots[n][id] = row;
}

inline shard_state state_at(std::uint64_t v) {
  shard_state s;
  for (std::uint64_t step = 1; step <= v; ++step) merge(s, changes(step));
  return s;
}

// Every fifth version (and the first) is full.
inline checkpoint_kind kind_of(std::uint64_t v) {
  return v % 5 == 1 ? checkpoint_kind::full : checkpoint_kind::incremental;
}

}  // namespace troupe::storage::testing
