#include <gtest/gtest.h>

#include "gradient_check.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/nn/layers.hpp"
#include "troupe/nn/loss.hpp"

namespace troupe::nn {
namespace {

using testing::check_options;
using testing::gradient_checker;

std::size_t check(layer& l, std::vector<shape> in, check_options o = {}) {
  return gradient_checker(l, std::move(in), o).run();
}

TEST(layers, dense_gradients) {
  dense_layer l(4);
  EXPECT_GE(check(l, {shape{5}}), 39u);
}

TEST(layers, dense_reads_any_input_shape_as_a_vector) {
  dense_layer l(3);
  EXPECT_GT(check(l, {shape{2, 2, 2}}), 30u);
}

TEST(layers, relu_and_sigmoid_gradients) {
  relu_layer r;
  EXPECT_GT(check(r, {shape{6}}), 10u);
  sigmoid_layer s;
  EXPECT_GT(check(s, {shape{2, 3}}), 10u);
}

TEST(layers, dropout_gradients_training_and_eval) {
  dropout_layer d(0.5f);
  EXPECT_GT(check(d, {shape{20}}, {.batch = 4}), 50u);
  dropout_layer e(0.5f);
  EXPECT_GT(check(e, {shape{20}}, {.training = false}), 50u);
}

TEST(layers, dropout_mask_drops_about_rate_and_scales_kept) {
  dropout_layer d(0.25f);
  d.set_name("d");
  ASSERT_TRUE(d.infer(std::vector<shape>{shape{1000}}, 3));
  tensor x(shape{4, 1000}), y(shape{4, 1000});
  x.fill(1.0f);
  const tensor* in[] = {&x};
  d.forward({nullptr, true, 1}, in, y);
  std::size_t zeros = 0;
  for (float v : y) {
    if (v == 0)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 4000.0, 0.25, 0.03);
  d.forward({nullptr, false, 2}, in, y);
  for (float v : y) EXPECT_EQ(v, 1.0f);
}

TEST(layers, flatten_concat_add_sum_gradients) {
  flatten_layer f;
  EXPECT_GT(check(f, {shape{2, 3}}), 10u);
  concat_layer c;
  EXPECT_GT(check(c, {shape{3}, shape{2, 2}}), 15u);
  add_layer a;
  EXPECT_GT(check(a, {shape{4}, shape{4}, shape{4}}), 30u);
  sum_layer s;
  EXPECT_GT(check(s, {shape{5}}), 10u);
}

TEST(layers, conv2d_gradients) {
  conv2d_layer c(3, 3);
  EXPECT_GT(check(c, {shape{2, 5, 6}}, {.batch = 2}), 100u);
  conv2d_layer chunked(2, 2, 0, 2);  // batch 3 in chunks of 2
  EXPECT_GT(check(chunked, {shape{2, 4, 3}}, {.batch = 3}), 60u);
  conv2d_layer padded(2, 3, 1);
  EXPECT_GT(check(padded, {shape{2, 4, 4}}, {.batch = 2}), 90u);
}

TEST(layers, maxpool_gradients) {
  maxpool2d_layer p(2);
  EXPECT_GT(check(p, {shape{2, 4, 5}}, {.batch = 2, .distinct_inputs = true}), 40u);
}

TEST(layers, batch_norm_gradients_feature_and_channel) {
  batch_norm_layer b;
  EXPECT_GT(check(b, {shape{4}}, {.batch = 5}), 15u);
  batch_norm_layer c;
  EXPECT_GT(check(c, {shape{3, 2, 2}}, {.batch = 3}), 30u);
  batch_norm_layer e;
  EXPECT_GT(check(e, {shape{3}}, {.batch = 4, .training = false}), 10u);
}

TEST(layers, fm_gradients) {
  fm_layer f;
  EXPECT_GT(check(f, {shape{4, 3}}), 30u);
}

TEST(layers, embedding_gradients_combine_equal_ids) {
  dataset d;
  d.info.sparse_fields = 3;
  d.rows = 3;
  d.sparse = {1, 2, 3, 1, 5, 3, 7, 2, 1};  // ids repeat within and across rows
  d.labels = {0, 0, 0};
  batch b(d, 0, 3);
  embedding_layer e(2, 0.5f);
  e.set_available_fields(3);
  EXPECT_EQ(check(e, {}, {.input = &b}), 10u);  // 5 unique rows x dim 2
  const auto& g = e.table()->grad();
  EXPECT_EQ(g.size(), 5u);  // unique ids 1, 2, 3, 5, 7
}

// The backward combines by the indices of the last forward's gather: a forward of another batch in
// between (an evaluation, say) must not mix that batch's ids into this one's gradient.
TEST(layers, embedding_backward_after_a_forward_of_another_batch_is_its_own_batchs) {
  dataset d;
  d.info.sparse_fields = 2;
  d.rows = 4;
  d.sparse = {1, 2, 2, 1, 8, 9, 9, 9};
  d.labels = {0, 0, 0, 0};
  batch first(d, 0, 2), other(d, 2, 2);
  embedding_layer e(2, 0.5f);
  e.set_available_fields(2);
  ASSERT_TRUE(e.infer({}, 1));
  tensor out(shape{2, 2, 2}), grad(shape{2, 2, 2});
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i + 1);
  forward_context a{&first, true, 0}, b{&other, true, 0};
  e.forward(a, {}, out);
  e.backward(a, {}, out, grad, {});
  const auto want_ids = e.table()->grad().ids;
  const auto want_rows = e.table()->grad().rows;
  e.forward(a, {}, out);
  e.forward(b, {}, out);
  e.backward(a, {}, out, grad, {});
  EXPECT_EQ(e.table()->grad().ids, want_ids);
  EXPECT_EQ(e.table()->grad().rows, want_rows);
  EXPECT_EQ(want_ids, (std::vector<std::uint64_t>{1, 2})) << "ids 1 and 2 only, in order of first occurrence";
}

TEST(layers, bad_shapes_name_the_layer) {
  conv2d_layer c(4, 3);
  c.set_name("conv_x");
  auto r = c.infer(std::vector<shape>{shape{10}}, 1);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == nn_errc::bad_shape);
  EXPECT_EQ(r.err().context(), "layer 'conv_x' (conv2d): expects [channels, height, width], got [10]");
  maxpool2d_layer p(4);
  EXPECT_FALSE(p.infer(std::vector<shape>{shape{1, 2, 2}}, 1));
  add_layer a;
  EXPECT_FALSE(a.infer(std::vector<shape>{shape{2}, shape{3}}, 1));
  fm_layer f;
  EXPECT_FALSE(f.infer(std::vector<shape>{shape{6}}, 1));
}

TEST(layers, registry_builds_from_specs_and_rejects_bad_ones) {
  auto& reg = layer_registry::instance();
  auto d = reg.create("dense:16");
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)->kind(), "dense");
  EXPECT_TRUE(reg.create("conv2d:filters=8,kernel=5"));
  EXPECT_TRUE(reg.create("dropout:0.3"));
  auto unknown = reg.create("densse:4");
  ASSERT_FALSE(unknown);
  EXPECT_TRUE(unknown.err() == nn_errc::unknown_name);
  auto bad = reg.create("dense:units=-3");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().context().find("'units' must be an integer"), std::string::npos)
      << bad.err().to_string();
  EXPECT_FALSE(reg.create("dense"));  // units is required
  EXPECT_FALSE(reg.create("dropout:rate=x"));
  auto typo = reg.create("conv2d:filters=8,kernal=5");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.err().context().find("has no option 'kernal'"), std::string::npos) << typo.err().to_string();
  EXPECT_FALSE(reg.create("relu:3"));
}

std::string spec_error(const std::string& spec) {
  auto l = layer_registry::instance().create(spec);
  return l ? std::string("built") : l.err().context();
}

TEST(layers, bare_numbers_fill_the_layers_keys_in_order) {
  auto c = layer_registry::instance().create("conv2d:8,3,1");
  ASSERT_TRUE(c) << c.err().to_string();
  const auto* conv = dynamic_cast<const conv2d_layer*>(c->get());
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->filters(), 8u);
  EXPECT_EQ(conv->kernel(), 3u);
  EXPECT_EQ(conv->padding(), 1u);
  auto mixed = layer_registry::instance().create("conv2d:16,padding=2");
  ASSERT_TRUE(mixed) << mixed.err().to_string();
  EXPECT_EQ(dynamic_cast<const conv2d_layer*>(mixed->get())->kernel(), 3u);
  EXPECT_NE(spec_error("conv2d:8,3,1,4").find("at most 3 bare numbers (filters, kernel, padding)"),
            std::string::npos)
      << spec_error("conv2d:8,3,1,4");
  EXPECT_NE(spec_error("conv2d:8,filters=4").find("'filters' is given twice"), std::string::npos);
  EXPECT_NE(spec_error("relu:3").find("takes no options"), std::string::npos) << spec_error("relu:3");
}

TEST(layers, batchnorm_options_are_checked) {
  EXPECT_EQ(spec_error("batchnorm:0.9,1e-5"), "built");
  EXPECT_NE(spec_error("batchnorm:momentm=0.5").find("has no option 'momentm' (it has momentum, epsilon)"),
            std::string::npos)
      << spec_error("batchnorm:momentm=0.5");
  EXPECT_NE(spec_error("batchnorm:2,0").find("momentum must be in [0, 1]"), std::string::npos);
  EXPECT_NE(spec_error("batchnorm:0.9,0").find("epsilon must be in (0, 1]"), std::string::npos);
  EXPECT_NE(spec_error("dense:inf").find("'inf' is not a number"), std::string::npos);
}

// The losses' gradients, by central differences on the logits.
void check_loss(loss_kind kind, std::size_t classes, std::vector<float> labels) {
  const std::size_t n = labels.size();
  tensor logits(shape{n, classes}), probs, grad;
  rng r(3);
  for (auto& v : logits) v = static_cast<float>(2 * r.normal());
  loss_forward(kind, logits, labels, probs);
  loss_backward(kind, probs, labels, grad);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float saved = logits[i];
    logits[i] = saved + 1e-2f;
    const double plus = loss_forward(kind, logits, labels, probs);
    logits[i] = saved - 1e-2f;
    const double minus = loss_forward(kind, logits, labels, probs);
    logits[i] = saved;
    EXPECT_NEAR((plus - minus) / 2e-2, grad[i], 1e-3) << "logit " << i;
  }
}

TEST(layers, softmax_cross_entropy_gradient_and_value) {
  check_loss(loss_kind::softmax_cross_entropy, 4, {0, 3, 1});
  tensor z(shape{1, 2}), p;
  z.fill(0.0f);
  std::vector<float> y{1};
  EXPECT_NEAR(loss_forward(loss_kind::softmax_cross_entropy, z, y, p), std::log(2.0), 1e-6);
}

TEST(layers, sigmoid_bce_gradient_and_stability) {
  check_loss(loss_kind::sigmoid_bce, 1, {0, 1, 1, 0});
  tensor z(shape{2, 1}), p;
  z[0] = 100.0f;
  z[1] = -100.0f;
  std::vector<float> y{1, 0};
  EXPECT_NEAR(loss_forward(loss_kind::sigmoid_bce, z, y, p), 0.0, 1e-6);
  y = {0, 1};
  EXPECT_NEAR(loss_forward(loss_kind::sigmoid_bce, z, y, p), 100.0, 1e-3);
}

}  // namespace
}  // namespace troupe::nn
