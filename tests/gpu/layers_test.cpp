// Every device layer against its nn layer on random inputs: outputs, input gradients and
// parameter gradients (and the embedding's combined sparse gradient).
#include <gtest/gtest.h>

#include "gpu_harness.hpp"
#include "gpu_skip.hpp"
#include "troupe/gpu/layers.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::gpu {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_device;
using testing::to_host;

struct gpu_env {
  stream s;
  blas_handle blas;
};

gpu_env make_env() {
  gpu_env e;
  auto s = stream::create();
  EXPECT_TRUE(s.has_value()) << s.err().to_string();
  if (!s) return e;
  e.s = std::move(*s);
  auto b = blas_handle::create(e.s.get());
  EXPECT_TRUE(b.has_value()) << b.err().to_string();
  if (b) e.blas = std::move(*b);
  return e;
}

// Runs `host` and its device twin forward and backward on the same random data and compares
// (`atol`: the absolute tolerance of every comparison, for layers whose results cancel).
void compare_layer(nn::layer& host, std::vector<nn::shape> in_shapes, std::size_t n,
                   const nn::batch* b = nullptr, bool training = true, float atol = 1e-5f) {
  auto out_shape = host.infer(in_shapes, 42);
  ASSERT_TRUE(out_shape.has_value()) << out_shape.err().to_string();
  const std::size_t k = in_shapes.size();
  // --- CPU ---
  std::vector<nn::tensor> in(k), gin(k);
  std::vector<const nn::tensor*> in_ptrs;
  std::vector<nn::tensor*> gin_ptrs;
  for (std::size_t i = 0; i < k; ++i) {
    in[i].resize(in_shapes[i].batched(n));
    auto v = random_floats(in[i].size(), 10 + i);
    std::copy(v.begin(), v.end(), in[i].begin());
    gin[i].resize(in[i].dims());
    in_ptrs.push_back(&in[i]);
    gin_ptrs.push_back(&gin[i]);
  }
  nn::tensor out(out_shape->batched(n)), gout(out_shape->batched(n));
  auto g = random_floats(gout.size(), 99);
  std::copy(g.begin(), g.end(), gout.begin());
  nn::forward_context ctx{b, training, 3};
  host.forward(ctx, in_ptrs, out);
  host.backward(ctx, in_ptrs, out, gout, gin_ptrs);
  // --- GPU ---
  gpu_env env = make_env();
  ASSERT_TRUE(env.blas.get());
  cuda_stream s = env.s.get();
  auto dl = make_device_layer(host, in_shapes, *out_shape);
  ASSERT_TRUE(dl.has_value()) << dl.err().to_string();
  std::vector<device_buffer<float>> pv, pg;
  std::vector<float*> pv_ptrs, pg_ptrs;
  for (nn::dense_param* p : host.params()) {
    pv.push_back(to_device(std::vector<float>(p->value.begin(), p->value.end()), s));
    pg.push_back(testing::zeros(p->value.size(), s));
    pv_ptrs.push_back(pv.back().data());
    pg_ptrs.push_back(pg.back().data());
  }
  if (!pv.empty()) (*dl)->bind(pv_ptrs, pg_ptrs);
  std::vector<device_buffer<float>> din, dgin;
  std::vector<const float*> din_ptrs;
  std::vector<float*> dgin_ptrs;
  for (std::size_t i = 0; i < k; ++i) {
    din.push_back(to_device(std::vector<float>(in[i].begin(), in[i].end()), s));
    dgin.push_back(testing::zeros(in[i].size(), s));
    din_ptrs.push_back(din.back().data());
    dgin_ptrs.push_back(dgin.back().data());
  }
  auto dout = testing::zeros(out.size(), s);
  auto dgout = to_device(g, s);
  device_context dctx{s, env.blas.get(), n, training, 3, b, nullptr};
  auto ok = (*dl)->prepare(dctx);
  ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
  ok = (*dl)->forward(dctx, din_ptrs, dout.data());
  ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
  ok = (*dl)->backward(dctx, din_ptrs, dout.data(), dgout.data(), dgin_ptrs);
  ASSERT_TRUE(ok.has_value()) << ok.err().to_string();
  const std::string what = host.kind();
  expect_close(to_host(dout.data(), out.size(), s), std::span<const float>(out.data(), out.size()),
               what + " out", 1e-4f, atol);
  for (std::size_t i = 0; i < k; ++i)
    expect_close(to_host(dgin[i].data(), gin[i].size(), s),
                 std::span<const float>(gin[i].data(), gin[i].size()), what + " grad_in " + std::to_string(i),
                 1e-4f, atol);
  auto ps = host.params();
  for (std::size_t i = 0; i < ps.size(); ++i)
    expect_close(to_host(pg[i].data(), ps[i]->grad.size(), s),
                 std::span<const float>(ps[i]->grad.data(), ps[i]->grad.size()), ps[i]->name);
  if (auto* t = host.table()) {
    nn::sparse_grad sg;
    auto r = (*dl)->download_sparse_grad(sg, s);
    ASSERT_TRUE(r.has_value()) << r.err().to_string();
    EXPECT_EQ(sg.ids, t->grad().ids);
    expect_close(sg.rows, t->grad().rows, "embedding sparse grad");
  }
}

TEST(gpu_layers, dense_small_and_wide) {
  TROUPE_REQUIRE_GPU();
  nn::dense_layer a(7);
  a.set_name("dense_a");
  compare_layer(a, {nn::shape{13}}, 5);
  nn::dense_layer b(128);
  b.set_name("dense_b");
  compare_layer(b, {nn::shape{1, 28, 28}}, 64);  // read as a 784-vector, as nn does
}

TEST(gpu_layers, activations) {
  TROUPE_REQUIRE_GPU();
  nn::relu_layer r;
  compare_layer(r, {nn::shape{10}}, 9);
  nn::sigmoid_layer s;
  compare_layer(s, {nn::shape{4, 3}}, 6);
}

TEST(gpu_layers, dropout_uses_the_same_mask) {
  TROUPE_REQUIRE_GPU();
  nn::dropout_layer d(0.3f);
  d.set_name("dropout");
  compare_layer(d, {nn::shape{50}}, 8, nullptr, true);
  nn::dropout_layer e(0.3f);
  compare_layer(e, {nn::shape{50}}, 8, nullptr, false);  // evaluation: identity
}

TEST(gpu_layers, flatten_concat_add_sum) {
  TROUPE_REQUIRE_GPU();
  nn::flatten_layer f;
  compare_layer(f, {nn::shape{3, 4}}, 5);
  nn::concat_layer c;
  compare_layer(c, {nn::shape{4}, nn::shape{2, 3}, nn::shape{1}}, 7);
  nn::add_layer a;
  compare_layer(a, {nn::shape{5}, nn::shape{5}, nn::shape{5}}, 4);
  nn::sum_layer s;
  compare_layer(s, {nn::shape{6, 2}}, 11);
}

TEST(gpu_layers, fm_interaction) {
  TROUPE_REQUIRE_GPU();
  nn::fm_layer f;
  compare_layer(f, {nn::shape{5, 4}}, 9);
  // The output, (sum v)^2 - sum v^2 halved over 26 fields, is a difference of two terms ~100x
  // larger: the device's and the host's summation orders differ by ~1e-5 of those terms (seen on an
  // H100: 0.0463104 vs 0.0463257).
  nn::fm_layer g;
  compare_layer(g, {nn::shape{26, 8}}, 300, nullptr, true, 1e-4f);
}

// Ids repeat within and across rows, so the scatter-add must combine equal ids.
nn::dataset sparse_data(std::size_t rows, std::size_t fields) {
  nn::dataset d;
  d.info = {"sparse-test", 0, fields, 2, {}, 0};
  d.rows = rows;
  nn::rng r(7);
  for (std::size_t i = 0; i < rows * fields; ++i) d.sparse.push_back(1000 + r.below(12));
  for (std::size_t i = 0; i < rows; ++i) d.labels.push_back(static_cast<float>(i % 2));
  return d;
}

TEST(gpu_layers, embedding_gather_and_combined_scatter) {
  TROUPE_REQUIRE_GPU();
  auto data = sparse_data(40, 5);
  nn::batch b(data, 3, 30);
  nn::embedding_layer e(6, 0.1f, 1, 3);
  e.set_name("embedding");
  e.set_available_fields(5);
  compare_layer(e, {}, b.size(), &b);
}

TEST(gpu_layers, losses_match_nn) {
  TROUPE_REQUIRE_GPU();
  gpu_env env = make_env();
  cuda_stream s = env.s.get();
  for (auto kind : {nn::loss_kind::softmax_cross_entropy, nn::loss_kind::sigmoid_bce}) {
    const std::size_t n = 37, c = kind == nn::loss_kind::sigmoid_bce ? 1 : 10;
    nn::tensor z(nn::shape{n, c}), probs, grad;
    auto zv = random_floats(n * c, 3, 3.0f);
    std::copy(zv.begin(), zv.end(), z.begin());
    std::vector<float> labels(n);
    for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<float>(i % (c == 1 ? 2 : c));
    const float loss = nn::loss_forward(kind, z, labels, probs);
    nn::loss_backward(kind, probs, labels, grad);
    auto dz = to_device(zv, s), dl = to_device(labels, s);
    auto dp = testing::zeros(n * c, s), de = testing::zeros(n, s), dm = testing::zeros(1, s),
         dg = testing::zeros(n * c, s);
    ASSERT_TRUE(
        loss_forward(kind, dz.data(), dl.data(), n, c, dp.data(), de.data(), dm.data(), s).has_value());
    ASSERT_TRUE(loss_backward(kind, dp.data(), dl.data(), n, c, dg.data(), s).has_value());
    std::vector<float> want_loss{loss};
    expect_close(to_host(dm.data(), 1, s), want_loss, "mean loss");
    expect_close(to_host(dp.data(), n * c, s), std::span<const float>(probs.data(), probs.size()), "probs");
    expect_close(to_host(dg.data(), n * c, s), std::span<const float>(grad.data(), grad.size()), "grad");
  }
}

TEST(gpu_layers, unsupported_kinds_are_named) {
  TROUPE_REQUIRE_GPU();
  nn::batch_norm_layer bn;
  bn.set_name("bn_1");
  std::vector<nn::shape> in{nn::shape{4}};
  ASSERT_TRUE(bn.infer(in, 1).has_value());
  auto dl = make_device_layer(bn, in, nn::shape{4});
  ASSERT_FALSE(dl.has_value());
  EXPECT_TRUE(dl.err() == gpu_errc::unsupported);
  EXPECT_NE(dl.err().to_string().find("layer 'bn_1' (batchnorm)"), std::string::npos) << dl.err().to_string();
}

}  // namespace
}  // namespace troupe::gpu
