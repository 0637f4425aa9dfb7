#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "troupe/nn/errc.hpp"
#include "troupe/nn/optimizer.hpp"
#include "troupe/nn/row_store.hpp"

namespace troupe::nn {
namespace {

std::unique_ptr<optimizer> make(optimizer_config c) {
  auto o = make_optimizer(c);
  EXPECT_TRUE(o) << o.err().to_string();
  return std::move(*o);
}

tensor vec(std::initializer_list<float> v) {
  tensor t(shape{v.size()});
  std::copy(v.begin(), v.end(), t.begin());
  return t;
}

TEST(optimizer, sgd_plain_and_momentum_match_hand_computation) {
  auto sgd = make({.type = "sgd", .learning_rate = 0.1});
  tensor w = vec({1.0f, -2.0f}), g = vec({0.5f, 1.0f});
  dense_slots s;
  apply_dense(*sgd, w, g, s);
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_FLOAT_EQ(w[1], -2.1f);
  EXPECT_TRUE(s.values.empty());

  auto mom = make({.type = "sgd", .learning_rate = 0.1, .momentum = 0.9});
  w = vec({1.0f});
  g = vec({0.5f});
  dense_slots m;
  apply_dense(*mom, w, g, m);  // v = 0.5, w = 1 - 0.05
  apply_dense(*mom, w, g, m);  // v = 0.9*0.5 + 0.5 = 0.95, w = 0.95 - 0.095
  EXPECT_FLOAT_EQ(m.values[0], 0.95f);
  EXPECT_FLOAT_EQ(w[0], 0.855f);
  EXPECT_EQ(m.step, 2u);
}

TEST(optimizer, adagrad_matches_hand_computation) {
  auto ada = make({.type = "adagrad", .learning_rate = 0.5, .initial_accumulator = 0.1, .epsilon = 1e-7});
  tensor w = vec({1.0f}), g = vec({2.0f});
  dense_slots s;
  apply_dense(*ada, w, g, s);  // acc = 0.1 + 4 = 4.1; w = 1 - 0.5*2/sqrt(4.1)
  EXPECT_FLOAT_EQ(s.values[0], 4.1f);
  EXPECT_NEAR(w[0], 1.0 - 0.5 * 2 / std::sqrt(4.1), 1e-6);
}

TEST(optimizer, adam_matches_hand_computation) {
  auto adam = make({.type = "adam", .learning_rate = 0.01, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8});
  tensor w = vec({1.0f}), g = vec({0.3f});
  dense_slots s;
  double m = 0, v = 0, ref = 1.0;
  for (int t = 1; t <= 3; ++t) {
    apply_dense(*adam, w, g, s);
    m = 0.9 * m + 0.1 * 0.3;
    v = 0.999 * v + 0.001 * 0.09;
    const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    ref -= lr_t * m / (std::sqrt(v) + 1e-8);
  }
  EXPECT_NEAR(w[0], ref, 1e-6);
  EXPECT_NEAR(s.values[0], m, 1e-7);
  EXPECT_NEAR(s.values[1], v, 1e-7);
  EXPECT_EQ(s.step, 3u);
}

// The vectorized kernels (one clone per instruction set, the widest this CPU has) give the bits of
// the element-by-element float arithmetic, on a length with a tail of every width.
TEST(optimizer, vectorized_kernels_give_the_scalar_bits) {
  const std::size_t n = 1037;
  tensor w(shape{n}), g(shape{n});
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = std::cos(0.11f * static_cast<float>(i)) * (i % 7 == 0 ? 1e-3f : 1.0f);
  }
  for (const char* type : {"adam", "adagrad"}) {
    auto o = make({.type = type, .learning_rate = 0.01, .epsilon = 1e-8, .weight_decay = 0.001});
    tensor wv = w;
    dense_slots s;
    const bool adam = std::string(type) == "adam";
    std::vector<float> ws(w.begin(), w.end()), a(n, adam ? 0.0f : 0.1f), b(n, 0.0f);  // adagrad: acc 0.1
    const float wd = 0.001f, eps = 1e-8f;
    for (std::uint64_t t = 1; t <= 3; ++t) {
      apply_dense(*o, wv, g, s);
      for (std::size_t i = 0; i < n; ++i) {
        volatile float gi = g[i] + wd * ws[i];  // volatile: one rounding per operation
        if (adam) {
          const float lr_t =
              static_cast<float>(0.01 * std::sqrt(1 - std::pow(0.999, static_cast<double>(t))) /
                                 (1 - std::pow(0.9, static_cast<double>(t))));
          volatile float m = 0.9f * a[i] + (1 - 0.9f) * gi;
          volatile float v2 = (1 - 0.999f) * gi;
          volatile float v = 0.999f * b[i] + v2 * gi;
          a[i] = m;
          b[i] = v;
          volatile float step = lr_t * m;
          ws[i] -= step / (std::sqrt(v) + eps);
        } else {
          volatile float sq = gi * gi;
          a[i] += sq;
          volatile float step = 0.01f * gi;
          ws[i] -= step / (std::sqrt(a[i]) + eps);
        }
      }
    }
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(wv[i], ws[i]) << type << " element " << i;
  }
}

// Adam's bias correction (cached for the first steps) gives the same bits as computing it each
// step, at any step count (inside and past the cache) and after a learning-rate change.
TEST(optimizer, adam_bias_correction_is_exact_at_every_step_count) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999;
  const float eps = 1e-7f;
  auto adam = make({.type = "adam", .learning_rate = lr, .beta1 = b1, .beta2 = b2, .epsilon = eps});
  for (std::uint64_t before : {0ull, 1ull, 2ull, 500ull, 1022ull, 1023ull, 1024ull, 1025ull, 100000ull}) {
    for (double rate : {lr, 0.003}) {
      adam->set_learning_rate(rate);
      float w[3] = {0.5f, -1.0f, 2.0f}, s[6] = {0.01f, -0.02f, 0.03f, 0.001f, 0.002f, 0.003f};
      const float g[3] = {0.3f, -0.1f, 0.05f};
      float rw[3], rs[6];
      std::copy(w, w + 3, rw);
      std::copy(s, s + 6, rs);
      std::uint64_t step = before;
      adam->update(w, g, s, 3, step);
      EXPECT_EQ(step, before + 1);
      // The kernel as written before the cache: the pow pair every step.
      const double t = static_cast<double>(before + 1);
      const float lr_t = static_cast<float>(rate * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)));
      for (int i = 0; i < 3; ++i) {
        rs[i] = static_cast<float>(b1) * rs[i] + (1 - static_cast<float>(b1)) * g[i];
        rs[3 + i] = static_cast<float>(b2) * rs[3 + i] + (1 - static_cast<float>(b2)) * g[i] * g[i];
        rw[i] -= lr_t * rs[i] / (std::sqrt(rs[3 + i]) + eps);
      }
      for (int i = 0; i < 3; ++i) ASSERT_EQ(w[i], rw[i]) << "step " << before + 1 << " lr " << rate;
      for (int i = 0; i < 6; ++i) ASSERT_EQ(s[i], rs[i]) << "step " << before + 1 << " lr " << rate;
    }
  }
}

TEST(optimizer, sparse_rows_use_the_dense_kernel_with_per_row_steps) {
  auto adam = make({.type = "adam", .learning_rate = 0.01});
  embedding_table table("t", 2, 9, {embedding_init::kind::zeros, 0});
  row_slots slots(2, *adam);
  EXPECT_EQ(slots.width(), 4u);
  sparse_grad g{2, {7, 11}, {1, 2, 3, 4}};
  apply_sparse(*adam, table, g, slots);
  sparse_grad g2{2, {7}, {1, 2}};
  apply_sparse(*adam, table, g2, slots);
  // Row 7 took two steps, row 11 one: the same as dense updates of those rows.
  tensor w7 = vec({0, 0}), w11 = vec({0, 0});
  dense_slots s7, s11;
  tensor g7 = vec({1, 2}), g11 = vec({3, 4});
  apply_dense(*adam, w7, g7, s7);
  apply_dense(*adam, w7, g7, s7);
  apply_dense(*adam, w11, g11, s11);
  EXPECT_FLOAT_EQ(table.row(7)[1], w7[1]);
  EXPECT_FLOAT_EQ(table.row(11)[0], w11[0]);
  std::vector<float> saved(4);
  std::uint64_t step = 0;
  ASSERT_TRUE(slots.read(7, saved.data(), step));
  EXPECT_EQ(step, 2u);
  EXPECT_FLOAT_EQ(saved[0], s7.values[0]);  // m of element 0
  EXPECT_FLOAT_EQ(saved[2], s7.values[2]);  // v of element 0
  EXPECT_FALSE(slots.read(99, saved.data(), step));
  // Checkpoint round trip into fresh state.
  row_slots restored(2, *adam);
  restored.write(7, saved.data(), step);
  std::vector<float> again(4);
  std::uint64_t step2 = 0;
  ASSERT_TRUE(restored.read(7, again.data(), step2));
  EXPECT_EQ(again, saved);
  EXPECT_EQ(step2, 2u);
}

TEST(optimizer, embedding_rows_are_deterministic_from_seed_and_id) {
  embedding_table a("emb", 4, 123), b("emb", 4, 123), c("emb", 4, 124);
  std::vector<float> ra(a.row(42), a.row(42) + 4);
  b.row(1);  // creation order does not matter
  std::vector<float> rb(b.row(42), b.row(42) + 4);
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, std::vector<float>(c.row(42), c.row(42) + 4));
  std::vector<std::uint64_t> ids{5, 6};
  std::vector<float> rows{1, 2, 3, 4, 5, 6, 7, 8};
  a.write_rows(ids, rows.data());
  std::vector<float> back(8);
  a.read_rows(ids, back.data());
  EXPECT_EQ(back, rows);
}

// read_rows (batched, pipelined two batches ahead) equals row() one id at a time, for every count
// around the batch size, with repeated ids and rows created on the way.
TEST(optimizer, batched_read_rows_match_row_by_row) {
  embedding_table a("emb", 16, 5), b("emb", 16, 5);
  for (std::size_t n : {0, 1, 31, 32, 33, 64, 65, 97, 1000}) {
    std::vector<std::uint64_t> ids;
    for (std::size_t i = 0; i < n; ++i) ids.push_back(i % 3 == 0 ? i * 7919 % 50 : i * 104729 + n);
    std::vector<float> got(n * 16);
    a.read_rows(ids, got.data());
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < 16; ++k) ASSERT_EQ(got[i * 16 + k], b.row(ids[i])[k]) << n << " " << i;
  }
}

// Many rows over several slabs and index growths: every id keeps its slot and row, row pointers
// taken early stay valid (rows never move), find() misses absent ids, clear() empties it.
TEST(row_store, rows_keep_their_place_across_slabs_and_index_growth) {
  row_store rs(3, 0.5f);
  const std::uint32_t n = 3 * row_store::kSlabRows + 17;
  bool created = false;
  float* first = rs.row(rs.insert(1'000'003, created));
  EXPECT_TRUE(created);
  EXPECT_EQ(first[2], 0.5f);
  first[0] = 42;
  for (std::uint32_t i = 0; i < n; ++i) {
    auto id = static_cast<std::uint64_t>(i) * 7919;  // spread ids, some colliding in low bits
    float* r = rs.row(rs.insert(id, created));
    ASSERT_TRUE(created || id == 1'000'003);
    r[1] = static_cast<float>(i);
  }
  EXPECT_EQ(rs.size(), n + 1);
  EXPECT_EQ(first[0], 42);  // the same memory after 3 new slabs and several index growths
  for (std::uint32_t i = 0; i < n; ++i) {
    auto slot = rs.find(static_cast<std::uint64_t>(i) * 7919);
    ASSERT_NE(slot, row_store::npos);
    EXPECT_EQ(rs.row(slot)[1], static_cast<float>(i));
    EXPECT_EQ(rs.id(slot), static_cast<std::uint64_t>(i) * 7919);
  }
  EXPECT_EQ(rs.insert(7919, created), rs.find(7919));
  EXPECT_FALSE(created);
  EXPECT_EQ(rs.find(7918), row_store::npos);
  std::size_t seen = 0;
  rs.for_each([&](std::uint64_t, std::uint32_t) { ++seen; });
  EXPECT_EQ(seen, rs.size());
  rs.clear();
  EXPECT_EQ(rs.size(), 0u);
  EXPECT_EQ(rs.find(7919), row_store::npos);
  EXPECT_EQ(rs.row(rs.insert(5, created))[0], 0.5f);
}

// Rows of 16 floats are one cache line each (64-byte aligned) in the first slab and in the slabs
// carved out of huge blocks after it, also after clear() and when the index outgrows 2 MB.
TEST(row_store, rows_are_cache_line_aligned_across_slabs_and_clear) {
  row_store rs(16, 0.25f);
  bool created = false;
  for (int round = 0; round < 2; ++round) {
    for (std::uint64_t id = 0; id < 140000; ++id) {  // 35 slabs; an index of 512k entries (8 MB)
      const float* r = rs.row(rs.insert(id * 7 + 1, created));
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(r) % 64, 0u) << "row " << id;
      ASSERT_EQ(r[15], 0.25f);
    }
    EXPECT_EQ(rs.find(7 * 139999 + 1), 139999u);
    rs.clear();
  }
}

// apply_sparse in batches equals one update per row, for more rows than a batch.
TEST(optimizer, batched_sparse_apply_matches_row_by_row) {
  auto adam = make({.type = "adam", .learning_rate = 0.01});
  embedding_table a("t", 4, 9), b("t", 4, 9);
  row_slots sa(4, *adam), sb(4, *adam);
  sparse_grad g;
  g.dim = 4;
  for (std::uint64_t id = 0; id < 100; ++id) {
    g.ids.push_back(id * 31 + 5);
    for (int k = 0; k < 4; ++k)
      g.rows.push_back(0.01f * static_cast<float>(id % 7) - 0.02f * static_cast<float>(k));
  }
  for (int round = 0; round < 2; ++round) {
    apply_sparse(*adam, a, g, sa);
    for (std::size_t i = 0; i < g.size(); ++i) {
      std::uint64_t* step = nullptr;
      float* s = sb.get(g.ids[i], &step);
      adam->update(b.row(g.ids[i]), g.row(i), s, 4, *step);
    }
  }
  for (auto id : g.ids)
    for (int k = 0; k < 4; ++k) ASSERT_EQ(a.row(id)[k], b.row(id)[k]);
}

// apply_sparse reports the slots of the rows it updated (what a PS shard checkpoints next), each
// once however often it was updated, and row_slots::id maps them back to the ids.
TEST(optimizer, sparse_apply_reports_updated_slots_once) {
  auto adam = make({.type = "adam", .learning_rate = 0.01});
  embedding_table table("t", 2, 9);
  row_slots slots(2, *adam);
  slot_set updated;
  sparse_grad g;
  g.dim = 2;
  for (std::uint64_t id = 0; id < 70; ++id) {  // more than a batch
    g.ids.push_back(id * 1000003 + 1);
    g.rows.insert(g.rows.end(), {0.1f, -0.2f});
  }
  apply_sparse(*adam, table, g.ids, g.rows.data(), slots, &updated);
  sparse_grad h;  // half of the same ids and 10 new ones
  h.dim = 2;
  for (std::size_t i = 0; i < 80; i += 2) {
    h.ids.push_back(i < 70 ? g.ids[i] : 7 + i);
    h.rows.insert(h.rows.end(), {0.3f, 0.4f});
  }
  apply_sparse(*adam, table, h.ids, h.rows.data(), slots, &updated);
  std::set<std::uint64_t> want(g.ids.begin(), g.ids.end()), got;
  want.insert(h.ids.begin(), h.ids.end());
  for (auto s : updated.slots()) EXPECT_TRUE(got.insert(slots.id(s)).second) << "slot " << s << " twice";
  EXPECT_EQ(got, want);
  EXPECT_EQ(updated.size(), want.size());
  updated.clear();
  EXPECT_EQ(updated.size(), 0u);
  apply_sparse(*adam, table, std::span(h.ids).first(1), h.rows.data(), slots, &updated);
  ASSERT_EQ(updated.size(), 1u);
  EXPECT_EQ(slots.id(updated.slots()[0]), h.ids[0]);
}

TEST(optimizer, slot_set_keeps_first_insertion_order_and_clears) {
  slot_set s;
  EXPECT_TRUE(s.insert(5));
  EXPECT_TRUE(s.insert(100000));
  EXPECT_FALSE(s.insert(5));
  EXPECT_TRUE(s.insert(63));
  EXPECT_TRUE(s.insert(64));
  EXPECT_EQ(s.slots(), (std::vector<std::uint32_t>{5, 100000, 63, 64}));
  EXPECT_TRUE(s.contains(100000));
  EXPECT_FALSE(s.contains(6));
  EXPECT_FALSE(s.contains(1u << 30));
  s.clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_FALSE(s.contains(5));
  EXPECT_FALSE(s.contains(64));
  EXPECT_TRUE(s.insert(64));
  EXPECT_EQ(s.slots(), (std::vector<std::uint32_t>{64}));
}

TEST(optimizer, bad_configs_are_named) {
  auto r = make_optimizer({.type = "rmsprop"});
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == nn_errc::unknown_name);
  EXPECT_NE(r.err().context().find("rmsprop"), std::string::npos);
  EXPECT_TRUE(make_optimizer({.type = "sgd", .learning_rate = 0}).err() == nn_errc::bad_config);
  EXPECT_TRUE(make_optimizer({.type = "sgd", .momentum = 1.5}).err() == nn_errc::bad_config);
  EXPECT_TRUE(make_optimizer({.type = "adam", .beta1 = 1.0}).err() == nn_errc::bad_config);
}

}  // namespace
}  // namespace troupe::nn
